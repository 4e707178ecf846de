"""Two models side by side for real, through the SDK: two aliases of the shipped GGUF (one with a chat template
of its own and a smaller context), served by one embedded server (loaded on demand, one at a time) and by two
workers that each serve one of them (a foreground request for a model whose worker is gone is a 503)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis

from app.config import Settings
from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import SdkClients, ServerProcess, run_cli, wait_for_ok

pytestmark = pytest.mark.integration

#: A plain ChatML template: the shipped model's own adds a default system prompt, so the two render apart.
PLAIN_CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LIMIT = {"temperature": 0, "max_output_tokens": 16}
MODELS = ("smol", "plain")


def models_file(directory: Path) -> Path:
    shipped = Settings(_env_file=None).resolved_model_path
    path = directory / "models.toml"
    path.write_text(
        f"""
[aliases]
"gpt-4o" = "plain"

[[models]]
id = "smol"
path = "{shipped}"

[[models]]
id = "plain"
path = "{shipped}"
n_ctx = 1024
chat_template = '''{PLAIN_CHATML}'''
"""
    )
    return path


def loaded(client: openai.OpenAI) -> dict[str, bool]:
    return {model.id: bool((model.model_extra or {})["loaded"]) for model in client.models.list()}


def live_workers(client: openai.OpenAI) -> dict[str, int]:
    return {model.id: int((model.model_extra or {})["live_workers"]) for model in client.models.list()}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    directory = tmp_path_factory.mktemp("several-embedded")
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_MODELS_FILE": str(models_file(directory)),
        "RESPONSES_MAX_LOADED_MODELS": "1",
    }
    server = ServerProcess(env, directory / "server.log").start()
    clients = SdkClients()
    try:
        yield clients(server.base_url)
    finally:
        clients.close()
        server.stop()


def test_embedded_models_load_on_demand_one_at_a_time(embedded: openai.OpenAI) -> None:
    assert [model.id for model in embedded.models.list()] == ["smol", "plain"]
    assert embedded.models.retrieve("gpt-4o").id == "plain"
    with pytest.raises(openai.NotFoundError):
        embedded.models.retrieve("gpt-9")
    with pytest.raises(openai.BadRequestError) as unknown:
        embedded.responses.create(model="gpt-9", input="hi", **LIMIT)
    assert unknown.value.code == "model_not_found"
    assert loaded(embedded) == {"smol": False, "plain": False}
    first = embedded.responses.create(model="smol", input="Name a fruit.", **LIMIT)
    assert first.status in ("completed", "incomplete") and first.model == "smol"
    assert loaded(embedded) == {"smol": True, "plain": False}
    # A chain that switches models: the alias's model loads, and the other is unloaded to make room.
    second = embedded.responses.create(model="gpt-4o", input="Its colour?", previous_response_id=first.id, **LIMIT)
    assert second.status in ("completed", "incomplete") and second.model == "plain"
    assert loaded(embedded) == {"smol": False, "plain": True}
    third = embedded.responses.create(model="smol", input="Where from?", previous_response_id=second.id, **LIMIT)
    assert third.status in ("completed", "incomplete") and third.output_text
    # Each model renders with its own template: the same input is not the same prompt.
    counts = {model: embedded.responses.input_tokens.count(model=model, input="hi").input_tokens for model in MODELS}
    assert counts["smol"] > counts["plain"]


@dataclass
class Deployment:
    client: openai.OpenAI
    api: ServerProcess
    env: dict[str, str]
    logs: Path

    def start_worker(self, model: str) -> ServerProcess:
        command = ["worker", "--model", model]
        return ServerProcess(self.env, self.logs / f"worker-{model}.log", command=command).start()


@pytest.fixture(scope="module")
def distributed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    directory = tmp_path_factory.mktemp("several-distributed")
    with fresh_postgres_database() as database_url:
        env = {
            "RESPONSES_DATABASE_URL": database_url,
            "RESPONSES_REDIS_URL": redis_url,
            "RESPONSES_MODELS_FILE": str(models_file(directory)),
        }
        assert run_cli(["migrate"], env).returncode == 0
        api = ServerProcess(env, directory / "api.log").start()
        clients = SdkClients()
        try:
            yield Deployment(clients(api.base_url), api, env, directory)
        finally:
            clients.close()
            api.stop()


def test_distributed_workers_serve_the_models_they_are_given(distributed: Deployment) -> None:
    client = distributed.client
    workers = [distributed.start_worker("smol"), distributed.start_worker("plain")]
    try:
        assert wait_for_ok(f"{distributed.api.base_url}/health/workers", 90), "a model has no live worker"
        assert live_workers(client) == {"smol": 1, "plain": 1}
        first = client.responses.create(model="smol", input="Name a fruit.", **LIMIT)
        second = client.responses.create(model="gpt-4o", input="Its colour?", previous_response_id=first.id, **LIMIT)
        assert (first.model, second.model) == ("smol", "plain")
        assert {first.status, second.status} <= {"completed", "incomplete"} and second.output_text
        # The worker serving `plain` is gone: a foreground request for it is refused, a background one waits.
        workers.pop().stop()
        assert live_workers(client) == {"smol": 1, "plain": 0}
        with pytest.raises(openai.InternalServerError) as refused:
            client.responses.create(model="plain", input="hi", **LIMIT)
        assert refused.value.status_code == 503 and "'plain'" in refused.value.message
        waiting = client.responses.create(model="plain", input="Say hi.", background=True, **LIMIT)
        assert client.responses.create(model="smol", input="Say hi.", **LIMIT).status in ("completed", "incomplete")
        assert client.responses.retrieve(waiting.id).status == "queued"
        workers.append(distributed.start_worker("plain"))
        deadline = time.monotonic() + 90
        while client.responses.retrieve(waiting.id).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline, "the queued response was not taken by the new worker"
            time.sleep(0.2)
        assert client.responses.retrieve(waiting.id).status in ("completed", "incomplete")
        assert httpx.get(f"{distributed.api.base_url}/ready").json()["model_workers"] == {"smol": 1, "plain": 1}
    finally:
        for worker in workers:
            worker.stop()
