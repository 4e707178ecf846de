"""The `vector_store_chunks` table: a file's text in chunks, what search ranks. Its full-text index is the
database's own: an FTS5 table kept by triggers on SQLite, a generated tsvector column with a GIN index on Postgres
(both made by the migration, not declared here: queries name them in app/retrieval/lexical.py)."""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class VectorStoreChunkRow(Base):
    __tablename__ = "vector_store_chunks"

    #: An integer key: SQLite's FTS5 table is keyed by it (its rowid).
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    vector_store_id: Mapped[str] = mapped_column(String(64), ForeignKey("vector_stores.id", ondelete="CASCADE"))
    file_id: Mapped[str] = mapped_column(String(64))
    #: Its place in the file (0 first).
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    #: Its embedding as little-endian float32s (the store's embedding model's), normalised to length 1; None: the
    #: store has no embedding model.
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)

    __table_args__ = (Index("ix_vector_store_chunks_store_file", "vector_store_id", "file_id", "position"),)
