"""an index for counting a tenant's queued background responses (the cap checked at each background create)

Revision ID: 20261201_0011
Revises: 20261130_0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "20261201_0011"
down_revision = "20261130_0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_responses_tenant_status_background", "responses", ["tenant", "status", "background"])


def downgrade() -> None:
    op.drop_index("ix_responses_tenant_status_background", table_name="responses")
