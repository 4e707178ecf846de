"""The `files` table: a tenant's uploaded (or batch-written) file; its bytes are in `file_chunks`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime, utc_now


class FileRow(Base):
    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    #: "batch" (uploaded), "batch_output" (written by a batch).
    purpose: Mapped[str] = mapped_column(String(32))
    filename: Mapped[str] = mapped_column(String(512))
    #: The file's size; its chunks hold exactly this many bytes.
    bytes: Mapped[int] = mapped_column(BigInteger)
    #: `processed` (whole: the only files reads find), or `uploading` while an upload's chunks are being written in
    #: their own transactions (app/files/storage.py); retention drops one a crashed upload left.
    status: Mapped[str] = mapped_column(String(16), default="processed", server_default="processed")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (
        #: GET /v1/files: a tenant's files in order of creation.
        Index("ix_files_tenant_created_at", "tenant", "created_at"),
    )
