"""job leases, durable cancel requests, attempts and generation progress (for takeover)

Revision ID: 20261125_0005
Revises: 20261124_0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261125_0005"
down_revision = "20261124_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
    # In-progress rows from before this revision have no lease: they count as expired, as their heartbeat would.
    op.create_index("ix_responses_status_lease_expires_at", "responses", ["status", "lease_expires_at"])
    op.create_index("ix_responses_status_created_at", "responses", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_status_created_at", table_name="responses")
    op.drop_index("ix_responses_status_lease_expires_at", table_name="responses")
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild drops the old table, and with foreign keys on that
    # deletes every response_events row through their ON DELETE CASCADE.
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.drop_column("progress")
        batch.drop_column("attempts")
        batch.drop_column("cancel_requested_at")
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
