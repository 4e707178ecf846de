"""Queries on projects and API keys: by name, by id, by the key's hash; insert, list, revoke, note a use; a project's
limits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ApiKeyRow, ProjectRow


async def project_by_name(session: AsyncSession, name: str) -> ProjectRow | None:
    query = select(ProjectRow).where(ProjectRow.name == name)
    return (await session.execute(query)).scalar_one_or_none()


async def project_exists(session: AsyncSession, project_id: str) -> bool:
    query = select(exists().where(ProjectRow.id == project_id))
    return bool((await session.execute(query)).scalar())


async def insert_project(session: AsyncSession, row: ProjectRow) -> None:
    session.add(row)
    await session.flush()


async def insert_key(session: AsyncSession, row: ApiKeyRow) -> None:
    session.add(row)
    await session.flush()


async def keys_with_projects(session: AsyncSession, project_id: str | None) -> Sequence[tuple[ApiKeyRow, ProjectRow]]:
    """Every key (of one project, if given) with its project, oldest first."""
    query = select(ApiKeyRow, ProjectRow).join(ProjectRow, ApiKeyRow.project_id == ProjectRow.id)
    if project_id is not None:
        query = query.where(ApiKeyRow.project_id == project_id)
    rows = await session.execute(query.order_by(ApiKeyRow.created_at, ApiKeyRow.id))
    return [(key, project) for key, project in rows]


async def key_with_project(session: AsyncSession, key_id: str) -> tuple[ApiKeyRow, ProjectRow] | None:
    query = (
        select(ApiKeyRow, ProjectRow)
        .join(ProjectRow, ApiKeyRow.project_id == ProjectRow.id)
        .where(ApiKeyRow.id == key_id)
    )
    row = (await session.execute(query)).one_or_none()
    return None if row is None else (row[0], row[1])


async def key_by_hash(session: AsyncSession, key_hash: str) -> ApiKeyRow | None:
    query = select(ApiKeyRow).where(ApiKeyRow.key_hash == key_hash)
    return (await session.execute(query)).scalar_one_or_none()


async def revoke_key(session: AsyncSession, key_id: str, now: datetime) -> None:
    """Revoked now, unless it already was (the first revocation's time stays)."""
    query = (
        update(ApiKeyRow)
        .where(ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )
    await session.execute(query)


async def note_use(session: AsyncSession, key_id: str, now: datetime) -> None:
    query = (
        update(ApiKeyRow)
        .where(ApiKeyRow.id == key_id)
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    await session.execute(query)


async def any_key(session: AsyncSession) -> bool:
    """Whether any key exists, revoked or not (one index probe)."""
    return bool((await session.execute(select(exists().select_from(ApiKeyRow)))).scalar())


async def project_by_id(session: AsyncSession, project_id: str) -> ProjectRow | None:
    return await session.get(ProjectRow, project_id)


async def projects(session: AsyncSession) -> Sequence[ProjectRow]:
    """Every project, oldest first."""
    query = select(ProjectRow).order_by(ProjectRow.created_at, ProjectRow.id)
    return (await session.execute(query)).scalars().all()


async def set_project_limits(session: AsyncSession, project_id: str, limits: dict[str, int | None]) -> None:
    """Set some of a project's limits (None: back to the server's setting)."""
    query = (
        update(ProjectRow)
        .where(ProjectRow.id == project_id)
        .values(**limits)
        .execution_options(synchronize_session=False)
    )
    await session.execute(query)
