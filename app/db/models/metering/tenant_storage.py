"""The `tenant_storage` table: the bytes each tenant keeps stored, as last measured plus what writes added since
(app/quotas/): read on every write that stores data, so that the quota is one primary-key lookup."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UtcDateTime


class TenantStorageRow(Base):
    __tablename__ = "tenant_storage"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: The tenant's stored bytes: the last measurement, plus the sizes of the writes charged since.
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    #: When the last measurement wrote this row; None until the first one (only writes charged so far).
    measured_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=None)
