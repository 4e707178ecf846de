"""Hostile input where the real thing matters: truncation with the model's own tokenizer (rendered once, then
counted), and on Postgres, the ids and cursors it cannot hold or compare (NUL, over 64 characters, past 2^31)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.main import create_app
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.servers import run_cli
from tests.unit.responses.test_hostile_input import stored_responses

WORDS = "river owl glass comet bread map bee tea lantern orbit harbor meadow".split()  # noqa: SIM905


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(Settings(_env_file=None).resolved_model_path, n_ctx=512)


def test_truncation_renders_a_few_times_and_keeps_what_dropping_one_at_a_time_keeps(
    tokenizer: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(9)
    messages = [
        ChatMessage("user" if index % 2 == 0 else "assistant", " ".join(rng.choices(WORDS, k=rng.randint(5, 80))))
        for index in range(60)
    ]
    system = ChatMessage("system", "Be brief.")
    # What dropping the oldest one at a time, rendering each time, keeps.
    start = next(
        start for start in range(len(messages)) if tokenizer.fits(len(tokenizer.render([system, *messages[start:]])))
    )
    renders: list[int] = []
    render = tokenizer.render

    def counted_render(*args: Any, **kwargs: Any) -> list[int]:
        renders.append(1)
        return render(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "render", counted_render)
    tokens = tokenizer.render_within_context(system, messages, truncate=True)
    assert tokens == render([system, *messages[start:]])
    assert start > 10 and len(renders) <= 4, f"rendered {len(renders)} times for {start} dropped messages"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        migrated = run_cli(["migrate"], {"RESPONSES_DATABASE_URL": url})
        assert migrated.returncode == 0, migrated.stderr
        yield url


@pytest.fixture
async def postgres_app(postgres_url: str) -> AsyncIterator[FastAPI]:
    """The app in-process with the fake model, on Postgres: what is checked is what Postgres holds."""
    settings = Settings(database_url=postgres_url, model_id="fake-model", _env_file=None)
    application: FastAPI = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def postgres_client(postgres_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=postgres_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.mark.parametrize(
    ("method", "url", "body", "param"),
    [
        ("POST", "/v1/responses", {"input": [{"role": "user", "content": "x", "id": "msg_\u0000"}]}, "input[0].id"),
        ("POST", "/v1/responses", {"input": [{"role": "user", "content": "x", "id": "m" * 65}]}, "input[0].id"),
        ("POST", "/v1/responses", {"input": "x", "previous_response_id": "resp_\u0000"}, "previous_response_id"),
        ("POST", "/v1/responses", {"input": [{"type": "item_reference", "id": "msg_\u0000"}]}, "input[0].id"),
        ("GET", "/v1/responses/resp_%00", None, None),
        ("GET", "/v1/responses/resp_1/input_items?after=msg_%00", None, None),
        ("DELETE", "/v1/conversations/conv_%00", None, None),
    ],
)
async def test_postgres_ids_it_cannot_hold_are_400s(
    postgres_client: httpx.AsyncClient,
    postgres_app: FastAPI,
    method: str,
    url: str,
    body: dict | None,
    param: str | None,
) -> None:
    before = await stored_responses(postgres_app.state.runtime)
    reply = await postgres_client.request(method, url, json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert await stored_responses(postgres_app.state.runtime) == before
    assert (await postgres_client.post("/v1/responses", json={"input": "still serving"})).status_code == 200


async def test_postgres_a_cursor_past_2_to_the_31_is_a_400(postgres_client: httpx.AsyncClient) -> None:
    created = await postgres_client.post("/v1/responses", json={"input": "x", "background": True})
    response_id = created.json()["id"]
    reply = await postgres_client.get(
        f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": 2**31}
    )
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "starting_after", reply.text
    assert (await postgres_client.get(f"/v1/responses/{response_id}")).status_code == 200


async def test_postgres_a_lone_surrogate_in_metadata_stores_nothing(
    postgres_client: httpx.AsyncClient, postgres_app: FastAPI
) -> None:
    before = await stored_responses(postgres_app.state.runtime)
    raw = b'{"input": "hi", "metadata": {"k": "x\\ud800y"}}'
    reply = await postgres_client.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "metadata.k", reply.text
    assert await stored_responses(postgres_app.state.runtime) == before
