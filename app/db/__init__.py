"""Persistence: the declarative base, one ORM model a table (models/), engines and sessions (session.py), and
Alembic driven from code (migrations.py). It knows no domain: every query lives in its domain's repository.py."""
