"""a response's job class (interactive, background, batch): a batch line's end is its batch's to announce

Revision ID: 20261205_0015
Revises: 20261204_0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261205_0015"
down_revision = "20261204_0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("responses") as table:
        table.add_column(sa.Column("job_class", sa.String(16), nullable=True))


def downgrade() -> None:
    # In place (SQLite >= 3.35 has DROP COLUMN): a rebuild would delete every row that references a response
    # through its ON DELETE CASCADE (see 20261125_0005).
    with op.batch_alter_table("responses", recreate="never") as table:
        table.drop_column("job_class")
