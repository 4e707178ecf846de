"""a batch's model: the one its lines name, reported on the Batch object as the hosted API does

Revision ID: 20261204_0014
Revises: 20261203_0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261204_0014"
down_revision = "20261203_0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as table:
        table.add_column(sa.Column("model", sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as table:
        table.drop_column("model")
