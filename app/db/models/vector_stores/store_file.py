"""The `vector_store_files` table: a file attached to a vector store, its indexing status and its claim (the
process indexing it holds it until `lease_expires_at`; an expired claim is taken again)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class VectorStoreFileRow(Base):
    __tablename__ = "vector_store_files"

    vector_store_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("vector_stores.id", ondelete="CASCADE"), primary_key=True
    )
    #: The attached file's id (the Files API's): a vector store file is named by it, as hosted.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    #: The file's name when it was attached (search results name it, even once the file itself is deleted).
    filename: Mapped[str] = mapped_column(String(512), default="")
    #: in_progress, completed, cancelled, failed.
    status: Mapped[str] = mapped_column(String(16), default="in_progress")
    #: server_error, unsupported_file, invalid_file (with last_error_message) when it failed.
    last_error_code: Mapped[str | None] = mapped_column(String(32), default=None)
    last_error_message: Mapped[str | None] = mapped_column(Text, default=None)
    #: The bytes its chunks hold (their text and embeddings), once indexed.
    usage_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    attributes: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: "auto" or "static", and the sizes it chunks by (in word pieces, see app/retrieval/chunking.py).
    chunking_type: Mapped[str] = mapped_column(String(16), default="auto")
    max_chunk_size_tokens: Mapped[int] = mapped_column(Integer, default=800)
    chunk_overlap_tokens: Mapped[int] = mapped_column(Integer, default=400)
    #: The file batch that attached it, if one did.
    batch_id: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    #: The process indexing it (a claim), until when; an expired claim is taken again.
    claimed_by: Mapped[str | None] = mapped_column(String(64), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
    #: How many times indexing it started: past RESPONSES_VECTOR_INDEX_MAX_ATTEMPTS lost runs, it fails.
    attempts: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        #: GET .../files: a store's files in order of creation.
        Index("ix_vector_store_files_store_created_at", "vector_store_id", "created_at"),
        #: The indexing rounds: files still in progress.
        Index("ix_vector_store_files_status", "status"),
        #: A batch's files.
        Index("ix_vector_store_files_batch_id", "batch_id"),
    )
