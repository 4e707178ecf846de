"""batch lines refused by their project's rate limit wait (until the limit's retry-after) instead of ending as 429
error lines: the time a pending line waits until

Revision ID: 20261215_0025
Revises: 20261214_0024_reads
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261215_0025"
down_revision = "20261214_0024_reads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batch_lines", recreate="never") as batch:
        batch.add_column(sa.Column("wait_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batch_lines", recreate="never") as batch:
        batch.drop_column("wait_until")
