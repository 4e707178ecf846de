"""reads: every change of a `responses` row notified on Postgres (LISTEN llama_responses_changed), so that each API
node's read cache drops it without asking the database on every read; nothing on SQLite (one process: its cache
checks every read)

Revision ID: 20261214_0024_reads
Revises: 20261213_0023
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "20261214_0024_reads"
down_revision = "20261213_0023"
branch_labels = None
depends_on = None

#: The payload is the response's id, a space and its tenant (app/read_cache/listener.py reads it). NOTIFY is
#: delivered when the transaction commits (never for one rolled back), and once for repeats of the same payload.
POSTGRES_UP = [
    """CREATE FUNCTION llama_responses_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('llama_responses_changed', OLD.id || ' ' || OLD.tenant);
    ELSE
        PERFORM pg_notify('llama_responses_changed', NEW.id || ' ' || NEW.tenant);
    END IF;
    RETURN NULL;
END
$$""",
    "CREATE TRIGGER responses_notify_change AFTER INSERT OR UPDATE OR DELETE ON responses "
    "FOR EACH ROW EXECUTE FUNCTION llama_responses_notify_change()",
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS responses_notify_change ON responses",
    "DROP FUNCTION IF EXISTS llama_responses_notify_change()",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_DOWN:
            op.execute(statement)
