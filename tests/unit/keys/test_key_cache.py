"""The per-node key cache: a key read from the database is trusted for the TTL (so a revoked one stops working
within it, and not before it has passed), unknown keys are remembered as such, the cache is bounded, and a
server once keyed stays keyed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from app.db.migrations import upgrade_to_head_async
from app.db.session import Database
from app.errors import Unauthorized
from app.keys.cache import KeyCache
from app.keys.schemas import ApiKeyCreateRequest
from app.keys.service import create_key, revoke_key
from app.tenants.identity import Authenticator, Identity, hash_key, tenant_of_key


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}"
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    try:
        yield database
    finally:
        await database.dispose()


def settings(api_keys: str = "") -> Settings:
    return Settings(database_url="sqlite+aiosqlite:///unused.db", model_id="m", api_keys=api_keys, _env_file=None)


async def test_a_revoked_key_works_until_the_ttl_has_passed_then_never(database: Database) -> None:
    clock = Clock()
    authenticator = Authenticator(settings(), KeyCache(database, 5.0, clock=clock))
    created = await create_key(database, ApiKeyCreateRequest(project="billing", name="ci", role="member"))
    identity = await authenticator.identify(f"Bearer {created.value}")
    assert identity.tenant == f"project:{created.project_id}" and identity.role == "member"
    assert identity.key_id == created.id
    await revoke_key(database, created.id)
    clock.now_s += 4.9
    assert (await authenticator.identify(f"Bearer {created.value}")).tenant == identity.tenant  # cached
    clock.now_s += 0.1
    with pytest.raises(Unauthorized) as refused:
        await authenticator.identify(f"Bearer {created.value}")
    assert refused.value.code == "invalid_api_key" and refused.value.status_code == 401


async def test_a_new_key_is_known_at_once_and_an_unknown_one_is_remembered_for_the_ttl(database: Database) -> None:
    clock = Clock()
    cache = KeyCache(database, 5.0, clock=clock)
    created = await create_key(database, ApiKeyCreateRequest(project="p", name="n", role="read"))
    found = await cache.find(hash_key(created.value.encode()))
    assert found is not None and found.role == "read"
    # An unknown key is remembered as unknown: no query per request for a client trying keys.
    assert await cache.find("0" * 64) is None
    reads = 0
    original = cache._read

    async def counting(key_hash: str) -> Identity | None:
        nonlocal reads
        reads += 1
        return await original(key_hash)

    cache._read = counting  # type: ignore[method-assign]
    for _ in range(3):
        assert await cache.find("0" * 64) is None
    assert reads == 0
    clock.now_s += 5
    assert await cache.find("0" * 64) is None
    assert reads == 1


async def test_the_cache_is_bounded(database: Database) -> None:
    cache = KeyCache(database, 60.0, clock=Clock(), max_entries=3)
    for index in range(10):
        await cache.find(f"{index:064x}")
    assert len(cache._entries) == 3
    assert list(cache._entries) == [f"{index:064x}" for index in (7, 8, 9)]


async def test_a_server_stays_keyed_once_it_has_a_key(database: Database) -> None:
    clock = Clock()
    cache = KeyCache(database, 5.0, clock=clock)
    authenticator = Authenticator(settings(), cache)
    assert (await authenticator.identify("")).authenticated is False  # open
    created = await create_key(database, ApiKeyCreateRequest(project="p", name="n"))
    assert (await authenticator.identify("")).authenticated is False  # read at most once per TTL
    clock.now_s += 5
    with pytest.raises(Unauthorized):
        await authenticator.identify("")
    await revoke_key(database, created.id)
    clock.now_s += 60
    with pytest.raises(Unauthorized):
        await authenticator.identify("")


async def test_bootstrap_keys_are_admins_of_their_own_tenant(database: Database) -> None:
    authenticator = Authenticator(settings("alpha,beta"), KeyCache(database, 5.0))
    identity = await authenticator.identify("Bearer beta")
    assert identity.tenant == tenant_of_key(b"beta") and identity.role == "admin" and identity.key_id is None
    for header in ("", "Basic beta", "Bearer ", "Bearer gamma"):
        with pytest.raises(Unauthorized):
            await authenticator.identify(header)


async def test_a_project_is_known_by_id_and_an_unknown_one_is_remembered_for_the_ttl(database: Database) -> None:
    clock = Clock()
    cache = KeyCache(database, 5.0, clock=clock)
    assert await cache.project_exists("proj_later") is False
    created = await create_key(database, ApiKeyCreateRequest(project="p", name="n", role="member"))
    assert await cache.project_exists(created.project_id) is True
    reads = 0
    original = cache._read_project

    async def counting(project_id: str) -> bool:
        nonlocal reads
        reads += 1
        return await original(project_id)

    cache._read_project = counting  # type: ignore[method-assign]
    assert await cache.project_exists("proj_later") is False  # remembered: no query
    assert await cache.project_exists(created.project_id) is True
    assert reads == 0
    clock.now_s += 5.0
    assert await cache.project_exists(created.project_id) is True
    assert reads == 1
