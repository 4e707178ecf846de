"""a response's prompt-cache fingerprint (what a later response's diagnostics compare against) and its own
prompt_cache_diagnostics

Revision ID: 20261208_0018
Revises: 20261207_0017
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261208_0018"
down_revision = "20261207_0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses") as table:
        table.add_column(sa.Column("prompt_cache_fingerprint", sa.JSON(), nullable=True))
        table.add_column(sa.Column("prompt_cache_diagnostics", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild would delete every row that references a response
    # through its ON DELETE CASCADE (see 20261125_0005).
    with op.batch_alter_table("responses", recreate="never") as table:
        table.drop_column("prompt_cache_diagnostics")
        table.drop_column("prompt_cache_fingerprint")
