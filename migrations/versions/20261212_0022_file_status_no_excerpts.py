"""a file's status: `uploading` while an upload writes its chunks in transactions of their own (no read finds it),
`processed` once whole (every file before this one was written whole in one transaction); and webhook deliveries
no longer keep an excerpt of the receiver's answer (what a receiver says is never shown back: the excerpts kept
so far, of whatever a tenant aimed its endpoint at, go with the column)

Revision ID: 20261212_0022
Revises: 20261211_0021
Create Date: 2026-12-11
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261212_0022"
down_revision = "20261211_0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("files", recreate="never") as batch:
        batch.add_column(sa.Column("status", sa.String(16), nullable=False, server_default="processed"))
    with op.batch_alter_table("webhook_deliveries", recreate="never") as batch:
        batch.drop_column("last_response_excerpt")


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild would cascade-delete the chunks through their key.
    with op.batch_alter_table("webhook_deliveries", recreate="never") as batch:
        batch.add_column(sa.Column("last_response_excerpt", sa.Text(), nullable=True))
    with op.batch_alter_table("files", recreate="never") as batch:
        batch.drop_column("status")
