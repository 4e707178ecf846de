"""an index for listing a tenant's responses newest first (GET /v1/responses)

Revision ID: 20261128_0008
Revises: 20261126_0006
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "20261128_0008"
down_revision = "20261126_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_responses_tenant_created_at", "responses", ["tenant", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_tenant_created_at", table_name="responses")
