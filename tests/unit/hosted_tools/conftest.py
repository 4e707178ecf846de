"""The app in-process with the fake model, two tenants (keys `alpha` and `beta`), vector store files indexed by
its own round, and a SearXNG-compatible stub on loopback that web_search may reach."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.searxng_stub import SearchStub, search_stub


@pytest.fixture
def stub() -> Iterator[SearchStub]:
    with search_stub() as running:
        yield running


@pytest.fixture
def hosted_settings(tmp_path: Path, stub: SearchStub, request: pytest.FixtureRequest) -> Settings:
    """`@pytest.mark.settings(web="searxng")`: the stub is the web_search backend (none by default; a test sets
    the offline index's store on these settings once it made it); other keywords override fields."""
    marker = request.node.get_closest_marker("settings")
    overrides = dict(marker.kwargs) if marker else {}
    web = overrides.pop("web", None)
    values: dict[str, object] = {
        "batch_interval_s": 3600.0,
        "vector_index_poll_s": 0.05,
        "api_keys": "alpha,beta",
        "outbound_allowed_hosts": "127.0.0.1:*",
        **overrides,
    }
    if web == "searxng":
        values["web_search_searxng_url"] = stub.search_url
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'hosted.db'}", model_id="fake-model", _env_file=None, **values
    )


@pytest.fixture
async def hosted_app(hosted_settings: Settings, runner: FakeRunner, renderer: FakeRenderer) -> AsyncIterator[FastAPI]:
    app = create_app(hosted_settings, fake_generation(renderer, runner))
    async with app.router.lifespan_context(app):
        yield app


def _client(app: FastAPI, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", headers={"authorization": f"Bearer {key}"}
    )


@pytest.fixture
async def alpha(hosted_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(hosted_app, "alpha") as http:
        yield http


@pytest.fixture
async def beta(hosted_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(hosted_app, "beta") as http:
        yield http


async def store_with(
    client: httpx.AsyncClient, files: dict[str, tuple[str, dict[str, object] | None]]
) -> tuple[str, dict[str, str]]:
    """A vector store holding `files` (name -> (text, attributes)), every file indexed: its id, and the file ids."""
    store = (await client.post("/v1/vector_stores", json={"name": "docs"})).json()["id"]
    ids = {}
    for name, (text, attributes) in files.items():
        upload = await client.post("/v1/files", files={"file": (name, text.encode())}, data={"purpose": "assistants"})
        assert upload.status_code == 200, upload.text
        ids[name] = upload.json()["id"]
        body: dict[str, object] = {"file_id": ids[name]}
        if attributes is not None:
            body["attributes"] = attributes
        attached = await client.post(f"/v1/vector_stores/{store}/files", json=body)
        assert attached.status_code == 200, attached.text
    deadline = time.monotonic() + 20
    for file_id in ids.values():
        while True:
            status = (await client.get(f"/v1/vector_stores/{store}/files/{file_id}")).json()["status"]
            if status != "in_progress":
                assert status == "completed"
                break
            assert time.monotonic() < deadline, "the file was not indexed in time"
            await asyncio.sleep(0.02)
    return store, ids
