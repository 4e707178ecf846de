"""The app in-process with the fake model and, where a test asks for it, the fake embedding model; its vector
store files indexed by the app's own indexing round (embedded mode)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from app.config import Settings
from app.main import create_app
from app.testing.fake_embeddings import FakeEmbedder, fake_embeddings
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


def sdk_for(client: httpx.AsyncClient) -> AsyncOpenAI:
    """The SDK on `client`, with its key (the tenant it stands for)."""
    key = client.headers["authorization"].removeprefix("Bearer ")
    return AsyncOpenAI(api_key=key, base_url=str(client.base_url.join("/v1")), http_client=client, max_retries=0)


def vector_settings(tmp_path: Path, *, embedding: bool, **overrides: object) -> Settings:
    """A fresh SQLite file; `embedding`: one (fake) embedding model declared, which new stores use."""
    weights = tmp_path / "fake-embed.gguf"
    weights.write_bytes(b"GGUF")
    values: dict[str, object] = {"batch_interval_s": 3600.0, "vector_index_poll_s": 0.05, **overrides}
    if embedding:
        values["embedding_models"] = f"fake-embed={weights}"
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'vs.db'}", model_id="fake-model", _env_file=None, **values
    )


@pytest.fixture
def embedders() -> list[FakeEmbedder]:
    return []


@pytest.fixture
def embedding(request: pytest.FixtureRequest) -> bool:
    """`@pytest.mark.settings(embedding=True)`: the app has the fake embedding model."""
    marker = request.node.get_closest_marker("settings")
    return bool(marker and marker.kwargs.get("embedding"))


@pytest.fixture
async def vs_app(tmp_path: Path, embedding: bool, embedders: list[FakeEmbedder]) -> AsyncIterator[FastAPI]:
    settings = vector_settings(tmp_path, embedding=embedding, api_keys="alpha,beta")
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()), embeddings=fake_embeddings(embedders))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(vs_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Tenant `alpha`'s client."""
    transport = httpx.ASGITransport(app=vs_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}
    ) as http:
        yield http


@pytest.fixture
async def other(vs_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Tenant `beta`'s client."""
    transport = httpx.ASGITransport(app=vs_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}
    ) as http:
        yield http


async def upload(client: httpx.AsyncClient, name: str, data: bytes, purpose: str = "assistants") -> str:
    reply = await client.post("/v1/files", files={"file": (name, data)}, data={"purpose": purpose})
    assert reply.status_code == 200, reply.text
    file_id: str = reply.json()["id"]
    return file_id


async def settled(client: httpx.AsyncClient, store_id: str, file_id: str, timeout_s: float = 20.0) -> dict[str, object]:
    """The vector store file once it is no longer in progress."""
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, object] = (await client.get(f"/v1/vector_stores/{store_id}/files/{file_id}")).json()
        if body["status"] != "in_progress" or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.02)
