"""The openai SDK's own retries against a real HTTP server (uvicorn, in a thread) on the fake model, whose answers
are slower than the SDK's timeout: without a key each try is a new response; with an Idempotency-Key in
`extra_headers`, one create is one response, however many tries it took, JSON or stream."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from app.config import Settings
from app.main import create_app
from app.responses import service
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.protocol import assert_well_formed_stream

#: The fake model's answer: 20 words a tenth of a second apart, 2 s in all, twice the SDK's timeout below (which
#: is also the longest a stream may go without an event: a loaded machine's pauses stay under it).
WORDS = [f"w{index}" for index in range(20)]
WORD_DELAY_S = 0.1
TIMEOUT_S = 1.0


class ThreadedServer:
    """The app under uvicorn in a thread of its own (its own event loop), on a free port."""

    def __init__(self, tmp_path: Path, runner: FakeRunner) -> None:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'sdk.db'}", model_id="fake-model", _env_file=None
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        app = create_app(settings, fake_generation(FakeRenderer(), runner))
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def runner() -> FakeRunner:
    slow = FakeRunner(delay_s=WORD_DELAY_S)
    slow.reply = list(WORDS)
    return slow


@pytest.fixture
def server(tmp_path: Path, runner: FakeRunner) -> Iterator[ThreadedServer]:
    with ThreadedServer(tmp_path, runner) as running:
        yield running


class CountingClient:
    """An SDK client with the default two retries and a short timeout, counting the HTTP tries it makes."""

    def __init__(self, base_url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.tries = 0
        http = httpx.Client(event_hooks={"request": [self._count]})
        self.sdk = openai.OpenAI(base_url=base_url, api_key="x", timeout=timeout_s, max_retries=2, http_client=http)

    def _count(self, request: httpx.Request) -> None:
        if request.method == "POST":
            self.tries += 1


@pytest.fixture
def clients(server: ThreadedServer) -> Iterator[Callable[..., CountingClient]]:
    """CountingClients of the server, all closed at the test's end."""
    made: list[CountingClient] = []

    def make(timeout_s: float = TIMEOUT_S) -> CountingClient:
        made.append(CountingClient(server.base_url, timeout_s))
        return made[-1]

    yield make
    for client in made:
        client.sdk.close()


def stored(server: ThreadedServer, case: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{server.base_url}/responses", params={"metadata[case]": case, "limit": 100}, timeout=10)
    data: list[dict[str, Any]] = listed.json()["data"]
    return data


def test_without_a_key_each_try_of_a_slow_create_is_another_response(
    server: ThreadedServer, runner: FakeRunner, clients: Callable[..., CountingClient]
) -> None:
    client = clients()
    with pytest.raises(openai.APITimeoutError):
        client.sdk.responses.create(model="fake-model", input="hi", metadata={"case": "no-key"})
    assert client.tries == 3
    deadline = time.monotonic() + 10
    while len(stored(server, "no-key")) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(stored(server, "no-key")) == 3  # what docs/using/idempotency.md says a retried create costs


def test_with_a_key_a_create_whose_first_try_timed_out_is_one_response(
    server: ThreadedServer, runner: FakeRunner, clients: Callable[..., CountingClient]
) -> None:
    client = clients()
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body: dict[str, Any] = {"model": "fake-model", "input": "hi", "metadata": {"case": "keyed"}}
    try:
        response = client.sdk.responses.create(**body, extra_headers=key)
    except openai.APITimeoutError:  # every try may time out on a slow machine: the key still names the response
        response = clients(timeout_s=60).sdk.responses.create(**body, extra_headers=key)
    assert client.tries >= 2  # the first try took longer than the timeout: the SDK retried
    assert response.status == "completed" and response.output_text == " ".join(WORDS)
    assert [found["id"] for found in stored(server, "keyed")] == [response.id]
    assert len(runner.jobs) == 1 and not runner.runs[response.id].cancelled


def test_with_a_key_a_stream_retried_attaches_to_its_response(
    server: ThreadedServer, runner: FakeRunner, clients: Callable[..., CountingClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server is slow to start the first try's stream (as a busy one is): the SDK times out before its
    # headers and sends the create again, while the first try's response is still being made.
    prepare = service.prepare
    slow_starts = [2 * TIMEOUT_S]

    async def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        if slow_starts:
            await asyncio.sleep(slow_starts.pop())
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(service, "prepare", slow_prepare)
    client = clients()
    key = {"Idempotency-Key": str(uuid.uuid4())}
    stream = client.sdk.responses.create(
        model="fake-model", input="hi", metadata={"case": "stream"}, stream=True, extra_headers=key
    )
    events = [event.model_dump(mode="json") for event in stream]
    assert client.tries >= 2
    final = assert_well_formed_stream(events)  # from its first event, once
    assert final["status"] == "completed" and [found["id"] for found in stored(server, "stream")] == [final["id"]]
    assert len(runner.jobs) == 1 and not runner.runs[final["id"]].cancelled
