"""Persistence: SQLAlchemy models, sessions and the repositories that hold every query."""
