"""background jobs and stored stream events

Revision ID: 20261123_0002
Revises: 20261123_0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261123_0002"
down_revision = "20261123_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses") as batch:
        batch.add_column(sa.Column("stream", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("job", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_responses_status", "responses", ["status"])
    op.create_table(
        "response_events",
        sa.Column("response_id", sa.String(64), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"],
            ["responses.id"],
            name=op.f("fk_response_events_response_id_responses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("response_id", "sequence_number", name=op.f("pk_response_events")),
    )


def downgrade() -> None:
    op.drop_table("response_events")
    op.drop_index("ix_responses_status", table_name="responses")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("job")
        batch.drop_column("stream")
