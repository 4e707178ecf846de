"""vector stores, the files attached to them, their file batches and their chunks, with the database's own
full-text index of the chunks (SQLite: an FTS5 table kept by triggers; Postgres: a generated tsvector column)

Revision ID: 20261213_0023
Revises: 20261212_0022
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261213_0023"
down_revision = "20261212_0022"
branch_labels = None
depends_on = None

#: SQLite: the chunks' text indexed by FTS5 (stemmed, as Postgres's 'english' configuration is), its rows the
#: chunks' own (external content: the text is not stored twice), kept in step by the triggers below.
SQLITE_FTS = [
    "CREATE VIRTUAL TABLE vector_store_chunks_fts USING fts5("
    "text, content='vector_store_chunks', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER vector_store_chunks_fts_insert AFTER INSERT ON vector_store_chunks BEGIN "
    "INSERT INTO vector_store_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER vector_store_chunks_fts_delete AFTER DELETE ON vector_store_chunks BEGIN "
    "INSERT INTO vector_store_chunks_fts(vector_store_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "END",
]
POSTGRES_FTS = [
    "ALTER TABLE vector_store_chunks ADD COLUMN text_search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
    "CREATE INDEX ix_vector_store_chunks_text_search ON vector_store_chunks USING gin (text_search)",
]


def upgrade() -> None:
    op.create_table(
        "vector_stores",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
        sa.Column("embedding_model", sa.String(256), nullable=True),
        sa.Column("expires_after_days", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_active_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_stores")),
    )
    op.create_index("ix_vector_stores_tenant_created_at", "vector_stores", ["tenant", "created_at"])
    op.create_index("ix_vector_stores_expires_at", "vector_stores", ["expires_at"])
    op.create_table(
        "vector_store_files",
        sa.Column("vector_store_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("last_error_code", sa.String(32), nullable=True),
        sa.Column("last_error_message", sa.Text(), nullable=True),
        sa.Column("usage_bytes", sa.BigInteger(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=True),
        sa.Column("chunking_type", sa.String(16), nullable=False),
        sa.Column("max_chunk_size_tokens", sa.Integer(), nullable=False),
        sa.Column("chunk_overlap_tokens", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["vector_store_id"],
            ["vector_stores.id"],
            name=op.f("fk_vector_store_files_vector_store_id_vector_stores"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("vector_store_id", "id", name=op.f("pk_vector_store_files")),
    )
    op.create_index("ix_vector_store_files_store_created_at", "vector_store_files", ["vector_store_id", "created_at"])
    op.create_index("ix_vector_store_files_status", "vector_store_files", ["status"])
    op.create_index("ix_vector_store_files_batch_id", "vector_store_files", ["batch_id"])
    op.create_table(
        "vector_store_file_batches",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("vector_store_id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["vector_store_id"],
            ["vector_stores.id"],
            name=op.f("fk_vector_store_file_batches_vector_store_id_vector_stores"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_store_file_batches")),
    )
    op.create_index("ix_vector_store_file_batches_store", "vector_store_file_batches", ["vector_store_id"])
    op.create_table(
        "vector_store_chunks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("vector_store_id", sa.String(64), nullable=False),
        sa.Column("file_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["vector_store_id"],
            ["vector_stores.id"],
            name=op.f("fk_vector_store_chunks_vector_store_id_vector_stores"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_store_chunks")),
    )
    op.create_index(
        "ix_vector_store_chunks_store_file", "vector_store_chunks", ["vector_store_id", "file_id", "position"]
    )
    for statement in SQLITE_FTS if op.get_bind().dialect.name == "sqlite" else POSTGRES_FTS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS vector_store_chunks_fts_delete")
        op.execute("DROP TRIGGER IF EXISTS vector_store_chunks_fts_insert")
        op.execute("DROP TABLE IF EXISTS vector_store_chunks_fts")
    op.drop_table("vector_store_chunks")
    op.drop_table("vector_store_file_batches")
    op.drop_table("vector_store_files")
    op.drop_table("vector_stores")
