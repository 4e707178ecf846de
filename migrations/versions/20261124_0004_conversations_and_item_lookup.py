"""conversations, their items, an index of output items by id, and server secrets

Revision ID: 20261124_0004
Revises: 20261123_0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261124_0004"
down_revision = "20261123_0002"
branch_labels = None
depends_on = None

BACKFILL_BATCH = 500


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("next_position", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("active_response_id", sa.String(64), nullable=True),
        sa.Column("locked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_index("ix_conversations_tenant", "conversations", ["tenant"])
    op.create_table(
        "conversation_items",
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("item", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_items_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "position", name=op.f("pk_conversation_items")),
    )
    op.create_index("ix_conversation_items_item_id", "conversation_items", ["item_id"])
    op.create_table(
        "output_items",
        sa.Column("response_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name=op.f("fk_output_items_response_id_responses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("response_id", "position", name=op.f("pk_output_items")),
    )
    op.create_index("ix_output_items_item_id", "output_items", ["item_id"])
    op.create_index("ix_input_items_item_id", "input_items", ["item_id"])
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_server_secrets")),
    )
    _index_existing_outputs()


def _index_existing_outputs() -> None:
    """Responses stored before this revision: their output items become referencable too."""
    connection = op.get_bind()
    responses = sa.table("responses", sa.column("id", sa.String), sa.column("output", sa.JSON))
    output_items = sa.table(
        "output_items", sa.column("response_id", sa.String), sa.column("position", sa.Integer), sa.column("item_id")
    )
    last = ""
    while True:
        rows = connection.execute(
            sa.select(responses.c.id, responses.c.output)
            .where(responses.c.id > last)
            .order_by(responses.c.id)
            .limit(BACKFILL_BATCH)
        ).all()
        if not rows:
            return
        entries = [
            {"response_id": response_id, "position": position, "item_id": item["id"]}
            for response_id, output in rows
            for position, item in enumerate(output or [])
            if isinstance(item, dict) and item.get("id")
        ]
        if entries:
            connection.execute(output_items.insert(), entries)
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_table("server_secrets")
    op.drop_index("ix_input_items_item_id", table_name="input_items")
    op.drop_index("ix_output_items_item_id", table_name="output_items")
    op.drop_table("output_items")
    op.drop_index("ix_conversation_items_item_id", table_name="conversation_items")
    op.drop_table("conversation_items")
    op.drop_index("ix_conversations_tenant", table_name="conversations")
    op.drop_table("conversations")
