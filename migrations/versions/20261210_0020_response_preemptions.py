"""how many of a response's runs were preempted (handed back for another tenant's job): those runs ended well, so
they do not count against RESPONSES_MAX_ATTEMPTS when a later run is lost

Revision ID: 20261210_0020
Revises: 20261209_0019
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261210_0020"
down_revision = "20261209_0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild would cascade-delete the events through their keys.
    with op.batch_alter_table("responses", recreate="never") as batch:
        batch.drop_column("preemptions")
