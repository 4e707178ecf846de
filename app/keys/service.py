"""Projects and API keys: create one (and its project, if new), list them, revoke one; the one place a key is
generated and hashed for storage."""

from __future__ import annotations

import secrets
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from app.db.base import utc_now
from app.db.models import ApiKeyRow, ProjectRow
from app.db.session import Database
from app.errors import NotFound, validation_error
from app.ids import new_id
from app.keys import repository
from app.keys.schemas import MAX_NAME_CHARS, ApiKey, ApiKeyCreateRequest, ApiKeyList, CreatedApiKey
from app.tenants.identity import as_role, hash_key, tenant_of_key, tenant_of_project

KEY_PREFIX = "sk-lr-"
#: Random bytes in a key (256 bits), URL-safe base64 after the prefix.
KEY_RANDOM_BYTES = 32
#: Characters of a key shown in a list: the prefix and 4 more, then the last 4.
REDACTED_HEAD = len(KEY_PREFIX) + 4
REDACTED_TAIL = 4


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_RANDOM_BYTES)


def redact(key: str) -> str:
    return f"{key[:REDACTED_HEAD]}...{key[-REDACTED_TAIL:]}"


def _unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def _as_api_key(row: ApiKeyRow, project: ProjectRow) -> ApiKey:
    role = as_role(row.role)
    if role is None:
        raise ValueError(f"API key {row.id} has an unknown role {row.role!r}")
    return ApiKey(
        id=row.id,
        name=row.name,
        role=role,
        project=project.name,
        project_id=project.id,
        redacted_value=row.redacted_value,
        created_at=int(row.created_at.timestamp()),
        last_used_at=_unix(row.last_used_at),
        revoked_at=_unix(row.revoked_at),
    )


def check_request(project: str, name: str, role: str) -> ApiKeyCreateRequest:
    """The CLI's arguments as a create request, or a 400 naming what is wrong (the API's own checks)."""
    try:
        return ApiKeyCreateRequest.model_validate({"project": project, "name": name, "role": role})
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


async def create_key(database: Database, request: ApiKeyCreateRequest) -> CreatedApiKey:
    """A new key of `request.project` (created first if there is none of that name), shown this once."""
    key = generate_key()
    try:
        created = await _insert_key(database, request, key)
    except IntegrityError:
        # Another create made the same project between our read and our insert: that project is ours too.
        created = await _insert_key(database, request, key)
    return CreatedApiKey(**created.model_dump(), value=key)


async def _insert_key(database: Database, request: ApiKeyCreateRequest, key: str) -> ApiKey:
    async with database.transaction() as session:
        project = await repository.project_by_name(session, request.project)
        if project is None:
            project = ProjectRow(id=new_id("proj"), name=request.project, created_at=utc_now())
            await repository.insert_project(session, project)
        row = ApiKeyRow(
            id=new_id("key"),
            project_id=project.id,
            name=request.name,
            role=request.role,
            key_hash=hash_key(key.encode()),
            redacted_value=redact(key),
            created_at=utc_now(),
        )
        await repository.insert_key(session, row)
        return _as_api_key(row, project)


async def list_keys(database: Database, project: str | None = None) -> ApiKeyList:
    """Every key (of the project named `project`, if given), oldest first; never the keys themselves."""
    async with database.read() as session:
        project_id = None
        if project is not None:
            found = await repository.project_by_name(session, project)
            if found is None:
                raise _project_not_found(project)
            project_id = found.id
        rows = await repository.keys_with_projects(session, project_id)
        return ApiKeyList(data=[_as_api_key(key, owner) for key, owner in rows])


async def revoke_key(database: Database, key_id: str) -> ApiKey:
    """Revoke a key for good (again: a no-op); every API node refuses it within RESPONSES_KEY_CACHE_TTL_S."""
    async with database.transaction() as session:
        await repository.revoke_key(session, key_id, utc_now())
        found = await repository.key_with_project(session, key_id)
        if found is None:
            raise NotFound(f"API key with id '{key_id}' not found.", param="key_id")
        return _as_api_key(*found)


def _project_not_found(name: str) -> NotFound:
    return NotFound(f"Project '{name[:MAX_NAME_CHARS]}' not found.", param="project")


async def tenant_of_api_key(database: Database, key: str) -> str:
    """The tenant whose data a key reads: its project's for a key in the database (revoked or not), else the
    bootstrap key's own (what the operator CLI's `--api-key` names)."""
    sent = key.encode("utf-8", "surrogatepass")  # typed on a command line: text, not a Latin-1 header
    async with database.read() as session:
        row = await repository.key_by_hash(session, hash_key(sent))
    return tenant_of_project(row.project_id) if row is not None else tenant_of_key(sent)


async def tenant_of_project_name(database: Database, name: str) -> str:
    async with database.read() as session:
        project = await repository.project_by_name(session, name)
    if project is None:
        raise _project_not_found(name)
    return tenant_of_project(project.id)
