"""Queries on server secrets: read one, and add one if no node has yet."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ServerSecretRow


async def get_secret(session: AsyncSession, name: str) -> str | None:
    return (await session.execute(select(ServerSecretRow.value).where(ServerSecretRow.name == name))).scalar()


async def insert_secret(session: AsyncSession, name: str, value: str) -> None:
    """Raises IntegrityError when another node stored one of that name first."""
    session.add(ServerSecretRow(name=name, value=value))
    await session.flush()
