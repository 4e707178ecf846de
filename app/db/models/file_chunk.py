"""The `file_chunks` table: a file's bytes, in order, at most a chunk (1 MiB) a row (bytea on Postgres, a BLOB on
SQLite), so that a file is written and read a chunk at a time and every API node reads the same bytes."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class FileChunkRow(Base):
    __tablename__ = "file_chunks"

    file_id: Mapped[str] = mapped_column(String(64), ForeignKey("files.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
