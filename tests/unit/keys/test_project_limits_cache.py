"""The per-node cache of project limits: a project's limits as read at most the TTL ago (a change applies once it
has passed, not before), the server's settings for other tenants and unknown projects without a query, and the
last limits read while the database is unreachable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from app.db.migrations import upgrade_to_head_async
from app.db.session import Database
from app.errors import ServiceUnavailable
from app.keys.limits_cache import ProjectLimitsCache
from app.keys.project_limits import set_limits
from app.keys.schemas import ApiKeyCreateRequest, ProjectLimitsUpdate
from app.keys.service import create_key
from app.limits.policy import TenantLimits
from app.tenants.identity import tenant_of_key, tenant_of_project
from app.testing.fakes import FakeClock

SERVER = TenantLimits(requests_per_min=60, tokens_per_min=0, max_concurrent_requests=64, max_queued_background=1000)


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'limits.db'}"
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite+aiosqlite:///unused.db",
        model_id="m",
        key_cache_ttl_s=5.0,
        rate_limit_requests_per_min=60,
        _env_file=None,
    )


async def new_project(database: Database, name: str) -> str:
    created = await create_key(database, ApiKeyCreateRequest(project=name, name="k"))
    return created.project_id


async def test_a_change_applies_once_the_ttl_has_passed(database: Database, settings: Settings) -> None:
    clock = FakeClock()
    cache = ProjectLimitsCache(database, settings, clock=clock)
    project = await new_project(database, "p")
    tenant = tenant_of_project(project)
    assert await cache.limits_of(tenant) == SERVER  # nothing of its own yet
    await set_limits(database, settings, project, ProjectLimitsUpdate(requests_per_min=5, max_queued_background=0))
    clock.now_s += 4.9
    assert await cache.limits_of(tenant) == SERVER  # read 4.9 s ago: still trusted
    clock.now_s += 0.1
    assert await cache.limits_of(tenant) == TenantLimits(
        requests_per_min=5, tokens_per_min=0, max_concurrent_requests=64, max_queued_background=0
    )
    await set_limits(database, settings, project, ProjectLimitsUpdate(requests_per_min=None))
    clock.now_s += 5
    assert (await cache.limits_of(tenant)).requests_per_min == 60


async def test_other_tenants_get_the_servers_settings(database: Database, settings: Settings) -> None:
    cache = ProjectLimitsCache(database, settings)
    await database.dispose()  # no query: it would fail
    assert await cache.limits_of(tenant_of_key(b"boot")) == SERVER
    assert await cache.limits_of("public") == SERVER


async def test_an_unknown_project_has_the_servers_settings(database: Database, settings: Settings) -> None:
    assert await ProjectLimitsCache(database, settings).limits_of(tenant_of_project("proj_nope")) == SERVER


async def test_an_unreachable_database_keeps_the_last_limits_read_or_is_a_503(
    tmp_path: Path, database: Database, settings: Settings
) -> None:
    clock = FakeClock()
    project = await new_project(database, "p")
    await set_limits(database, settings, project, ProjectLimitsUpdate(requests_per_min=5))
    down = Database.connect(f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'no.db'}")
    try:
        cache = ProjectLimitsCache(database, settings, clock=clock)
        assert (await cache.limits_of(tenant_of_project(project))).requests_per_min == 5
        cache._database = down
        clock.now_s += 60
        assert (await cache.limits_of(tenant_of_project(project))).requests_per_min == 5
        with pytest.raises(ServiceUnavailable):
            await cache.limits_of(tenant_of_project("proj_other"))
    finally:
        await down.dispose()
