"""limits per project: each NULL stands for the server's setting, 0 turns the limit off

Revision ID: 20261206_0016
Revises: 20261205_0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261206_0016"
down_revision = "20261205_0015"
branch_labels = None
depends_on = None

INTEGER_LIMITS = ("requests_per_min", "tokens_per_min", "max_concurrent_requests", "max_queued_background")


def upgrade() -> None:
    with op.batch_alter_table("projects") as table:
        for name in INTEGER_LIMITS:
            table.add_column(sa.Column(name, sa.Integer(), nullable=True))
        table.add_column(sa.Column("max_stored_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild of `projects` would trip the api_keys that reference it.
    with op.batch_alter_table("projects", recreate="never") as table:
        table.drop_column("max_stored_bytes")
        for name in reversed(INTEGER_LIMITS):
            table.drop_column(name)
