"""The app in-process on a fresh SQLite file, with the fake model, driven through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


@pytest.fixture
def renderer() -> FakeRenderer:
    return FakeRenderer()


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def settings(tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """A fresh SQLite file; `@pytest.mark.settings(strict_tools=True)` and the like override fields. The periodic
    batch advance is off (hourly) unless a test sets `batch_interval_s`: its queries stay out of other tests'
    counts, and batch tests advance when they choose."""
    marker = request.node.get_closest_marker("settings")
    overrides = {"batch_interval_s": 3600.0, **(marker.kwargs if marker else {})}
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'unit.db'}", model_id="fake-model", _env_file=None, **overrides
    )


@pytest.fixture
async def app(settings: Settings, renderer: FakeRenderer, runner: FakeRunner) -> AsyncIterator[FastAPI]:
    application = create_app(settings, fake_generation(renderer, runner))
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
def app_runtime(app: FastAPI) -> Runtime:
    runtime: Runtime = app.state.runtime
    return runtime


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        yield http


@pytest.fixture
async def two_tenants(tmp_path: Path, runner: FakeRunner) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two clients of one keyed app: keys `alpha` and `beta`, two tenants."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}", model_id="m", api_keys="alpha,beta", _env_file=None
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}) as a,
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}) as b,
        ):
            yield a, b
