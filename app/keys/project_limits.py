"""A project's limits: the server's settings (`server_limits`), a project's overrides over them (`effective`), and
reading, setting and listing them (the /v1/projects/{id}/limits routes and the `projects` commands)."""

from __future__ import annotations

from dataclasses import asdict

from app.config import Settings
from app.db.models import ProjectRow
from app.db.session import Database
from app.errors import NotFound
from app.keys import repository
from app.keys.schemas import LIMIT_NAMES, LimitValues, ProjectLimits, ProjectLimitsList, ProjectLimitsUpdate
from app.limits.policy import TenantLimits


def server_limits(settings: Settings) -> TenantLimits:
    """What applies to every tenant that no project overrides (a bootstrap key's, an open server's)."""
    return TenantLimits(
        requests_per_min=settings.rate_limit_requests_per_min,
        tokens_per_min=settings.rate_limit_tokens_per_min,
        max_concurrent_requests=settings.max_concurrent_requests_per_tenant,
        max_queued_background=settings.max_queued_background_per_tenant,
        max_stored_bytes=settings.max_stored_bytes_per_tenant,
    )


def _overrides(project: ProjectRow) -> LimitValues:
    return LimitValues.model_validate({name: getattr(project, name) for name in LIMIT_NAMES})


def _or(override: int | None, server: int) -> int:
    return server if override is None else override


def effective(server: TenantLimits, project: ProjectRow | None) -> TenantLimits:
    """The project's limits over the server's: each NULL stands for the server's setting."""
    if project is None:
        return server
    return TenantLimits(
        requests_per_min=_or(project.requests_per_min, server.requests_per_min),
        tokens_per_min=_or(project.tokens_per_min, server.tokens_per_min),
        max_concurrent_requests=_or(project.max_concurrent_requests, server.max_concurrent_requests),
        max_queued_background=_or(project.max_queued_background, server.max_queued_background),
        max_stored_bytes=_or(project.max_stored_bytes, server.max_stored_bytes),
    )


def _as_limits(project: ProjectRow, settings: Settings) -> ProjectLimits:
    applied = effective(server_limits(settings), project)
    return ProjectLimits(
        project_id=project.id,
        project=project.name,
        overrides=_overrides(project),
        effective=LimitValues.model_validate(asdict(applied)),
    )


def _project_not_found(project_id: str) -> NotFound:
    return NotFound(f"Project with id '{project_id[:64]}' not found.", param="project_id")


async def read_limits(database: Database, settings: Settings, project_id: str) -> ProjectLimits:
    async with database.read() as session:
        project = await repository.project_by_id(session, project_id)
    if project is None:
        raise _project_not_found(project_id)
    return _as_limits(project, settings)


async def set_limits(
    database: Database, settings: Settings, project_id: str, update: ProjectLimitsUpdate
) -> ProjectLimits:
    """Set the limits the update gives; every node applies them within RESPONSES_KEY_CACHE_TTL_S."""
    async with database.transaction() as session:
        project = await repository.project_by_id(session, project_id)
        if project is None:
            raise _project_not_found(project_id)
        changes = update.changes()
        if changes:
            await repository.set_project_limits(session, project_id, changes)
            await session.refresh(project)
        return _as_limits(project, settings)


async def project_id_of(database: Database, id_or_name: str) -> str:
    """The id of the project with this id, else with this name (what an operator types), or a 404."""
    async with database.read() as session:
        project = await repository.project_by_id(session, id_or_name)
        if project is None:
            project = await repository.project_by_name(session, id_or_name)
    if project is None:
        raise NotFound(f"Project '{id_or_name[:128]}' not found (by id or name).", param="project")
    return project.id


async def list_limits(database: Database, settings: Settings) -> ProjectLimitsList:
    """Every project with its limits, oldest first."""
    async with database.read() as session:
        rows = await repository.projects(session)
    return ProjectLimitsList(data=[_as_limits(project, settings) for project in rows])
