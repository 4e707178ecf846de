"""file_search and web_search on the real model through the official SDK, in both modes: embedded (in-process,
SQLite and FTS5) and distributed (an API node and a worker process on Postgres and Redis). A forced file_search over
an uploaded file attached to a store, cited in the answer; a forced web_search through a SearXNG-compatible stub on
loopback (the outbound guard allowing it); and (embedded) the offline index. Each response is short (forced calls,
temperature 0, few output tokens); lexical search only (no embedding model), to keep them quick."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from openai import AsyncOpenAI
from openai.types.responses import ResponseFileSearchToolCall, ResponseFunctionWebSearch, ResponseOutputMessage

from app.config import Settings
from app.main import create_app
from app.testing.cluster import Cluster
from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import run_cli, wait_until_ready
from tests.searxng_stub import SearchStub, search_stub

pytestmark = pytest.mark.integration

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"
LIGHTHOUSE = b"Pelican Point lighthouse: the lighthouse keeper is Ada Morrow. The lamp is lit at dusk every evening.\n"
TIDES = [
    {
        "url": "https://tides.example.org/pelican-point",
        "title": "Pelican Point tides",
        "content": "High tide at Pelican Point is at 14:05 today.",
    }
]


@pytest.fixture(scope="module")
def stub() -> Iterator[SearchStub]:
    with search_stub() as running:
        running.results = TIDES
        yield running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stub: SearchStub) -> Iterator[Cluster]:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    with fresh_postgres_database() as database_url:
        env = {
            "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
            "RESPONSES_WEB_SEARCH_SEARXNG_URL": stub.search_url,
            "RESPONSES_VECTOR_INDEX_POLL_S": "0.2",
        }
        made = Cluster(database_url, redis_url, tmp_path_factory.mktemp("hosted-cluster"), env)
        migrated = run_cli(["migrate"], made.env())
        assert migrated.returncode == 0, migrated.stderr
        try:
            made.api()
            made.worker()
            wait_until_ready(made.processes[0].base_url)
            yield made
        finally:
            made.stop_all()


@pytest.fixture
def embedded_settings(tmp_path: Path, stub: SearchStub) -> Settings:
    return Settings(
        database_url=sqlite_url(tmp_path),
        n_threads=1,
        outbound_allowed_hosts="127.0.0.1:*",
        web_search_searxng_url=stub.search_url,
        vector_index_poll_s=0.1,
        _env_file=None,
    )


@pytest.fixture(params=["embedded", "distributed"])
def api_url(request: pytest.FixtureRequest) -> str | None:
    """The distributed cluster's API node; None: embedded (set up outside the event loop, as the cluster is)."""
    if request.param == "embedded":
        return None
    cluster: Cluster = request.getfixturevalue("cluster")
    return cluster.processes[0].base_url


@pytest.fixture
async def sdk(api_url: str | None, embedded_settings: Settings) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK on the distributed cluster's API node, or on the app in-process (embedded)."""
    if api_url is not None:
        async with AsyncOpenAI(api_key="unused", base_url=f"{api_url}/v1", timeout=600, max_retries=0) as client:
            yield client
        return
    app = create_app(embedded_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as http:
            yield AsyncOpenAI(api_key="unused", base_url="http://test/v1", http_client=http, max_retries=0)


async def store_of(
    sdk: AsyncOpenAI, name: str, data: bytes, attributes: dict[str, Any] | None = None
) -> tuple[str, str]:
    uploaded = await sdk.files.create(file=(name, data), purpose="assistants")
    store = await sdk.vector_stores.create(name="docs")
    attached = await sdk.vector_stores.files.create_and_poll(
        file_id=uploaded.id, vector_store_id=store.id, attributes=attributes, poll_interval_ms=100
    )
    assert attached.status == "completed", attached.last_error
    return store.id, uploaded.id


async def test_a_forced_file_search_finds_the_uploaded_file_and_the_answer_cites_it(sdk: AsyncOpenAI) -> None:
    store, file_id = await store_of(sdk, "lighthouse.txt", LIGHTHOUSE)
    response = await sdk.responses.create(
        model=(await sdk.models.list()).data[0].id,
        input="Who is the lighthouse keeper at Pelican Point?",
        tools=[{"type": "file_search", "vector_store_ids": [store], "max_num_results": 3}],
        tool_choice={"type": "file_search"},
        include=["file_search_call.results"],
        temperature=0,
        max_output_tokens=96,
    )
    call, message = response.output[0], response.output[-1]
    assert isinstance(call, ResponseFileSearchToolCall) and call.status == "completed", response.output
    assert call.queries and call.results, call
    assert call.results[0].file_id == file_id and call.results[0].filename == "lighthouse.txt"
    assert isinstance(message, ResponseOutputMessage), response.output
    citations = [annotation for part in message.content for annotation in getattr(part, "annotations", [])]
    assert any(getattr(note, "file_id", None) == file_id for note in citations), message
    stored = await sdk.responses.retrieve(response.id)
    assert stored.output[0].type == "file_search_call"


async def test_a_forced_web_search_goes_through_the_searxng_endpoint(sdk: AsyncOpenAI, stub: SearchStub) -> None:
    before = len(stub.requests)
    response = await sdk.responses.create(
        model=(await sdk.models.list()).data[0].id,
        input="When is high tide at Pelican Point today?",
        tools=[{"type": "web_search", "search_context_size": "low"}],
        tool_choice={"type": "web_search_preview"},
        include=["web_search_call.action.sources"],
        temperature=0,
        max_output_tokens=96,
    )
    call = response.output[0]
    assert isinstance(call, ResponseFunctionWebSearch) and call.status == "completed", response.output
    assert call.action.type == "search" and call.action.sources is not None
    assert [source.url for source in call.action.sources] == [TIDES[0]["url"]]
    assert len(stub.requests) == before + 1 and stub.requests[-1][0] == "/search"
    assert isinstance(response.output[-1], ResponseOutputMessage)


async def test_the_offline_index_answers_without_external_access(embedded_settings: Settings, stub: SearchStub) -> None:
    app = create_app(embedded_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as http:
            sdk = AsyncOpenAI(api_key="unused", base_url="http://test/v1", http_client=http, max_retries=0)
            page = {"url": "https://tides.example.org/pelican-point", "title": "Pelican Point tides"}
            store, _ = await store_of(sdk, "tides.txt", b"High tide at Pelican Point is at 14:05 today.\n", page)
            embedded_settings.web_search_offline_store_id = store
            before = len(stub.requests)
            response = await sdk.responses.create(
                model=(await sdk.models.list()).data[0].id,
                input="When is high tide at Pelican Point today?",
                tools=[{"type": "web_search", "external_web_access": False}],  # type: ignore[list-item]
                tool_choice="required",
                include=["web_search_call.action.sources"],
                temperature=0,
                max_output_tokens=96,
            )
    call = response.output[0]
    assert isinstance(call, ResponseFunctionWebSearch) and call.status == "completed", response.output
    assert call.action.type == "search"
    assert call.action.sources is not None and [source.url for source in call.action.sources] == [page["url"]]
    assert len(stub.requests) == before
