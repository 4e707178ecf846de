"""the bytes each tenant keeps stored, as measured plus what writes added since: the stored-bytes quota

Revision ID: 20261207_0017
Revises: 20261206_0016
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261207_0017"
down_revision = "20261206_0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_storage",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_storage")),
    )


def downgrade() -> None:
    op.drop_table("tenant_storage")
