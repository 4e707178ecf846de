"""POST /v1/embeddings in-process on the fake embedding model: the SDK's create (its default base64 and floats),
strings, string arrays and token arrays, `dimensions` only where the model allows it, usage, and the 400s and 503s."""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import AsyncOpenAI, BadRequestError

from app.main import create_app
from app.testing.fake_embeddings import FakeEmbedder, fake_embeddings
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.vector_stores.conftest import vector_settings


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, FakeEmbedder]]:
    holder: list[FakeEmbedder] = []
    app = create_app(
        vector_settings(tmp_path, embedding=True),
        fake_generation(FakeRenderer(), FakeRunner()),
        embeddings=fake_embeddings(holder),
    )
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client, holder[0]


def sdk(client: httpx.AsyncClient) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=client, max_retries=0)


async def test_the_sdk_embeds_strings(setup: tuple[httpx.AsyncClient, FakeEmbedder]) -> None:
    client, embedder = setup
    created = await sdk(client).embeddings.create(model="fake-embed", input=["red apple", "green apple", "tax form"])
    assert created.model == "fake-embed" and created.object == "list" and len(created.data) == 3
    assert [entry.index for entry in created.data] == [0, 1, 2]
    vectors = [np.asarray(entry.embedding) for entry in created.data]
    assert all(
        len(vector) == 64 and math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-5) for vector in vectors
    )
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert created.usage.prompt_tokens == 6 and created.usage.total_tokens == 6
    assert np.allclose(vectors[0], embedder.vector("red apple"), atol=1e-6)


async def test_floats_base64_and_tokens(setup: tuple[httpx.AsyncClient, FakeEmbedder]) -> None:
    client, embedder = setup
    floats = (await client.post("/v1/embeddings", json={"model": "fake-embed", "input": "hello world"})).json()
    assert isinstance(floats["data"][0]["embedding"], list)
    packed = (
        await client.post(
            "/v1/embeddings", json={"model": "fake-embed", "input": "hello world", "encoding_format": "base64"}
        )
    ).json()
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=1e-6)
    tokens = (await client.post("/v1/embeddings", json={"model": "fake-embed", "input": [[1, 2, 3], [4]]})).json()
    assert len(tokens["data"]) == 2 and tokens["usage"]["prompt_tokens"] == 4
    one = (await client.post("/v1/embeddings", json={"model": "fake-embed", "input": [7, 8]})).json()
    assert len(one["data"]) == 1 and embedder.calls[-1] == ("fake-embed", [[7, 8]])


async def test_dimensions_and_refusals(setup: tuple[httpx.AsyncClient, FakeEmbedder]) -> None:
    client, embedder = setup
    same = await client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x", "dimensions": 64})
    assert same.status_code == 200
    fewer = await client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x", "dimensions": 8})
    assert fewer.status_code == 400 and fewer.json()["error"]["param"] == "dimensions"
    with pytest.raises(BadRequestError) as unknown:
        await sdk(client).embeddings.create(model="nope", input="x")
    assert unknown.value.code == "model_not_found"
    chat = await client.post("/v1/embeddings", json={"model": "fake-model", "input": "x"})
    assert chat.status_code == 400 and "not an embedding model" in chat.json()["error"]["message"]
    for body in (
        {"model": "fake-embed", "input": ""},
        {"model": "fake-embed", "input": []},
        {"model": "fake-embed", "input": ["a", ""]},
        {"model": "fake-embed", "input": ["a", 1]},
        {"model": "fake-embed", "input": "x", "encoding_format": "hex"},
        {"model": "fake-embed", "input": ["x"] * 2049},
        {"input": "x"},
    ):
        reply = await client.post("/v1/embeddings", json=body)
        assert reply.status_code == 400, (body, reply.text)
    embedder.unavailable = True
    gone = await client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"})
    assert gone.status_code == 503 and gone.json()["error"]["code"] == "model_unavailable"


async def test_without_embedding_models_it_is_a_400(tmp_path: Path) -> None:
    app = create_app(vector_settings(tmp_path, embedding=False), fake_generation(FakeRenderer(), FakeRunner()))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        reply = await client.post("/v1/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "model_not_found"
