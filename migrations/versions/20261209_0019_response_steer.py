"""a steer request stored on the response it steers, as a cancel is: whoever holds or later takes the job reads it

Revision ID: 20261209_0019
Revises: 20261208_0018
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261209_0019"
down_revision = "20261208_0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.add_column(sa.Column("steer_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild would cascade-delete the events through their keys.
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.drop_column("steer_requested_at")
