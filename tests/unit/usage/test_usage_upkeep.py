"""What keeps usage bounded: retention drops the days past RESPONSES_USAGE_RETENTION_DAYS (0 keeps them all), and
the per-tenant Prometheus counters name at most RESPONSES_METRICS_MAX_TENANTS tenants, bootstrap keys never by
their hash; the usage migration, up and down."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import date, timedelta
from pathlib import Path

import httpx
import pytest
from alembic import command
from sqlalchemy import select

from app.config import Settings
from app.db.migrations import alembic_config, upgrade_to_head_async
from app.db.models import UsageDayRow
from app.db.session import Database
from app.observability.metrics import REGISTRY, TENANT_LABELS, TenantLabels
from app.ops.retention import apply_retention, prune_usage
from app.runtime import Runtime
from app.usage import repository as usage


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database without the app: the app's own periodic retention would race these tests'."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'retention.db'}"
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    yield database
    await database.dispose()


async def days_kept(database: Database) -> list[date]:
    async with database.read() as session:
        return list((await session.execute(select(UsageDayRow.day).order_by(UsageDayRow.day))).scalars())


async def test_retention_drops_the_days_past_the_setting(database: Database) -> None:
    today = date(2026, 12, 3)
    async with database.transaction() as session:
        for days_ago in (0, 399, 400, 401, 800):
            await usage.add(session, usage.UsageEntry("public", "m", today - timedelta(days=days_ago)))
    assert await prune_usage(database, 0, today=today) == 0  # 0 keeps everything
    assert len(await days_kept(database)) == 5
    assert await prune_usage(database, 400, today=today) == 2
    assert await days_kept(database) == [today - timedelta(days=400), today - timedelta(days=399), today]
    assert await prune_usage(database, 400, today=today) == 0


async def test_the_retention_task_prunes_usage(database: Database) -> None:
    settings = Settings(database_url="sqlite+aiosqlite://", usage_retention_days=1, _env_file=None)
    today = date.today()
    async with database.transaction() as session:
        await usage.add(session, usage.UsageEntry("public", "m", today - timedelta(days=30)))
        await usage.add(session, usage.UsageEntry("public", "m", today + timedelta(days=1)))
    report = await apply_retention(database, settings)
    assert report.pruned_usage_days == 1 and await days_kept(database) == [today + timedelta(days=1)]


def test_the_tenant_label_cap() -> None:
    labels = TenantLabels(limit=2)
    assert [labels.label(tenant) for tenant in ("project:a", "project:b", "project:c", "project:a")] == [
        "project:a",
        "project:b",
        "other",
        "project:a",
    ]
    assert labels.label("key:" + "0" * 32) == "bootstrap"  # never the hash of a bootstrap key
    assert labels.label("project:d") == "other"
    labels.limit = 3  # raised: the next new tenant is named, the earlier ones keep their labels
    assert labels.label("project:d") == "project:d" and labels.label("project:c") == "other"
    assert TenantLabels(limit=0).label("public") == "other"


def sample(name: str, tenant: str) -> float:
    return REGISTRY.get_sample_value(f"llama_responses_tenant_{name}_total", {"tenant": tenant}) or 0.0


async def test_a_response_counts_in_its_tenants_series(client: httpx.AsyncClient) -> None:
    assert TENANT_LABELS.limit == 100  # the setting's default, applied as the app started
    label = TENANT_LABELS.label("public")
    before = {name: sample(name, label) for name in ("requests", "input_tokens", "output_tokens")}
    body = (await client.post("/v1/responses", json={"input": "count me"})).json()
    assert sample("requests", label) == before["requests"] + 1
    assert sample("output_tokens", label) == before["output_tokens"] + body["usage"]["output_tokens"]
    assert sample("input_tokens", label) == before["input_tokens"] + body["usage"]["input_tokens"]


@pytest.mark.settings(metrics_max_tenants=7)
async def test_the_app_applies_the_cap_setting(app_runtime: Runtime) -> None:
    try:
        assert TENANT_LABELS.limit == 7
    finally:
        TENANT_LABELS.limit = 100


def test_the_usage_migration_upgrades_and_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    config = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(config, "20261202_0012")
    command.upgrade(config, "20261203_0013")
    insert = "INSERT INTO usage VALUES ('public', 'm', '2026-12-03', 1, 2, 0, 3, 0.5)"
    with sqlite3.connect(path) as database:
        database.execute(insert)
        with pytest.raises(sqlite3.IntegrityError):
            database.execute(insert)  # one row a tenant, model and day
    command.downgrade(config, "20261202_0012")
    with sqlite3.connect(path) as database:
        assert not database.execute("SELECT name FROM sqlite_master WHERE name = 'usage'").fetchall()
    command.upgrade(config, "head")
