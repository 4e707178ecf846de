"""usage per tenant, model and UTC day: requests, input, cached and output tokens, generation seconds

Revision ID: 20261203_0013
Revises: 20261202_0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261203_0013"
down_revision = "20261202_0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("generation_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "model", "day", name=op.f("pk_usage")),
    )
    op.create_index("ix_usage_day", "usage", ["day"])


def downgrade() -> None:
    op.drop_index("ix_usage_day", table_name="usage")
    op.drop_table("usage")
