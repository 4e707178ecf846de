"""generation progress appended as rows (a few pieces each), not rewritten whole on every event

Revision ID: 20261126_0006
Revises: 20261125_0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261126_0006"
down_revision = "20261125_0005"
branch_labels = None
depends_on = None

_responses = sa.table("responses", sa.column("id", sa.String), sa.column("progress", sa.JSON))
_progress = sa.table(
    "generation_progress",
    sa.column("response_id", sa.String),
    sa.column("position", sa.Integer),
    sa.column("pieces", sa.JSON),
    sa.column("ids", sa.JSON),
)


def upgrade() -> None:
    op.create_table(
        "generation_progress",
        sa.Column("response_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("pieces", sa.JSON(), nullable=False),
        sa.Column("ids", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"],
            ["responses.id"],
            name=op.f("fk_generation_progress_response_id_responses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("response_id", "position", name=op.f("pk_generation_progress")),
    )
    # A generation running across the upgrade keeps what it stored: a takeover continues from it.
    bind = op.get_bind()
    stored = bind.execute(sa.select(_responses.c.id, _responses.c.progress).where(_responses.c.progress.is_not(None)))
    rows = [
        {"response_id": response_id, "position": 0, "pieces": progress["pieces"], "ids": progress.get("ids", [])}
        for response_id, progress in stored
        if progress and progress.get("pieces")
    ]
    if rows:
        op.bulk_insert(_progress, rows)
    # NOTE: never a table rebuild on SQLite (its batch mode's default): dropping the old `responses` table would
    # cascade into every table that references it. SQLite (3.35+) drops a column in place.
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.drop_column("progress")


def downgrade() -> None:
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
    bind = op.get_bind()
    query = sa.select(_progress.c.response_id, _progress.c.pieces, _progress.c.ids).order_by(
        _progress.c.response_id, _progress.c.position
    )
    joined: dict[str, dict[str, list[str]]] = {}
    for response_id, pieces, ids in bind.execute(query):
        progress = joined.setdefault(response_id, {"pieces": [], "ids": []})
        progress["pieces"] += pieces
        progress["ids"] += ids
    for response_id, progress in joined.items():
        bind.execute(sa.update(_responses).where(_responses.c.id == response_id).values(progress=progress))
    op.drop_table("generation_progress")
