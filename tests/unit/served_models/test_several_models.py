"""Several models in one deployment, in-process with fake models: /v1/models, routing by `model` (ids, aliases,
unknown ones), each model's own renderer and defaults, a chain that switches models, a model that fails to load,
and load on demand with eviction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
from openai.types import Model

from app.config import Settings
from app.db.session import Database
from app.generation.model_pool import ModelPool
from app.generation.registry import ModelRegistry, ModelSpec
from app.generation.renderers import RendererCache
from app.generation.runner import ModelRunner
from app.jobs.executor import JobExecutor
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner
from app.transport.base import GenerationQueue, ModelAvailability
from app.transport.inprocess import InProcessQueue
from app.transport.memory_bus import MemoryBus

MODELS_FILE = """
default = "small"
[aliases]
"gpt-4o" = "big"

[[models]]
id = "small"
path = "small.gguf"
temperature = 0.3
max_output_tokens = 32
owned_by = "us"
created = 1700000000

[[models]]
id = "big"
path = "big.gguf"

[[models]]
id = "broken"
path = "broken.gguf"
"""


class Models:
    """What the fake deployment holds: each model's renderer and runner, and which loads were asked for."""

    def __init__(self) -> None:
        self.renderers = {"small": FakeRenderer(n_ctx=256), "big": FakeRenderer(n_ctx=4096), "broken": FakeRenderer()}
        self.runners = {model: FakeRunner() for model in self.renderers}
        self.loads: list[str] = []

    def load(self, spec: ModelSpec) -> ModelRunner:
        self.loads.append(spec.id)
        if spec.id == "broken":
            raise RuntimeError("not a GGUF file")
        return self.runners[spec.id]

    def generation(self, max_models: int, queue: type[InProcessQueue] = InProcessQueue):
        async def build(
            settings: Settings, registry: ModelRegistry, database: Database, limits: object
        ) -> tuple[RendererCache, GenerationQueue]:
            pool = ModelPool(registry, self.load, max_models=max_models)
            cache = RendererCache(lambda spec: self.renderers[spec.id])
            bus = MemoryBus()
            return cache, queue(JobExecutor(pool, database, bus, owner="node_test", lease_s=settings.lease_s), bus)

        return build


class BigModelUnserved(InProcessQueue):
    """As a distributed deployment whose workers for `big` are all gone."""

    async def live_workers(self, model: str | None = None) -> int:
        return int(model != "big")

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        return {model: ModelAvailability(0 if model == "big" else 1) for model in models}


@pytest.fixture
def models() -> Models:
    return Models()


async def open_client(
    tmp_path: Path, models: Models, queue: type[InProcessQueue] = InProcessQueue, **values: object
) -> AsyncIterator[httpx.AsyncClient]:
    for name in ("small", "big", "broken"):
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF")
    (tmp_path / "models.toml").write_text(MODELS_FILE)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'm.db'}",
        models_file=tmp_path / "models.toml",
        _env_file=None,
        **values,  # type: ignore[arg-type]
    )
    max_models = settings.max_loaded_models
    app = create_app(settings, models.generation(max_models, queue))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client


@pytest.fixture
async def client(tmp_path: Path, models: Models) -> AsyncIterator[httpx.AsyncClient]:
    async for client in open_client(tmp_path, models, max_loaded_models=1):
        yield client


async def create(client: httpx.AsyncClient, **body: object) -> dict:
    reply = await client.post("/v1/responses", json={"input": "hello", **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


async def test_models_are_listed_and_retrieved_in_the_sdks_shape(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/v1/models")).json()
    assert [card["id"] for card in listed["data"]] == ["small", "big", "broken"]
    small = Model.model_validate(listed["data"][0])
    assert (small.owned_by, small.created, small.object) == ("us", 1700000000, "model")
    assert listed["data"][1]["owned_by"] == "llama-responses" and listed["data"][1]["created"] > 0
    assert all(card["loaded"] is False and "live_workers" not in card for card in listed["data"])
    assert (await client.get("/v1/models/big")).json()["id"] == "big"
    assert (await client.get("/v1/models/gpt-4o")).json()["id"] == "big", "an alias answers with its model"
    missing = await client.get("/v1/models/gpt-9")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "The model 'gpt-9' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


async def test_requests_go_to_the_model_they_name_with_its_renderer_and_defaults(
    client: httpx.AsyncClient, models: Models
) -> None:
    default = await create(client)
    assert default["model"] == "small" and default["temperature"] == 0.3 and default["max_output_tokens"] == 32
    big = await create(client, model="gpt-4o")
    assert big["model"] == "big" and big["temperature"] == 1.0 and big["max_output_tokens"] is None
    assert [job.model for job in models.runners["small"].jobs] == ["small"]
    assert [job.model for job in models.runners["big"].jobs] == ["big"]
    assert len(models.renderers["small"].rendered) == 1 and len(models.renderers["big"].rendered) == 1
    unknown = await client.post("/v1/responses", json={"input": "hi", "model": "gpt-9"})
    assert unknown.status_code == 400
    assert unknown.json()["error"] == {
        "message": "The requested model 'gpt-9' does not exist.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


async def test_a_chain_switches_models_each_turn_rendered_by_its_own(client: httpx.AsyncClient, models: Models) -> None:
    first = await create(client, model="small", input="Name a fruit.")
    second = await create(client, model="big", input="Its colour?", previous_response_id=first["id"])
    third = await create(client, model="small", input="Where from?", previous_response_id=second["id"])
    assert (first["model"], second["model"], third["model"]) == ("small", "big", "small")
    # The big model read the whole chain (the small model's answer included) with its own template.
    read_by_big = models.renderers["big"].rendered[-1]
    answer = first["output"][0]["content"][0]["text"]
    assert [message.content for message in read_by_big][:3] == ["Name a fruit.", answer, "Its colour?"]
    assert [message.content for message in models.renderers["small"].rendered[-1]][-1] == "Where from?"
    assert [job.model for job in models.runners["small"].jobs] == ["small", "small"]


async def test_load_on_demand_and_eviction_under_the_model_budget(client: httpx.AsyncClient, models: Models) -> None:
    async def loaded() -> dict[str, bool]:
        return {card["id"]: card["loaded"] for card in (await client.get("/v1/models")).json()["data"]}

    assert models.loads == [] and not any((await loaded()).values())
    await create(client, model="small")
    assert await loaded() == {"small": True, "big": False, "broken": False}
    await create(client, model="big")
    assert await loaded() == {"small": False, "big": True, "broken": False}
    await create(client, model="big")
    assert models.loads == ["small", "big"]


async def test_a_model_that_fails_to_load_fails_its_requests_and_the_others_go_on(
    client: httpx.AsyncClient, models: Models
) -> None:
    failed = await create(client, model="broken")
    assert failed["status"] == "failed"
    assert failed["error"]["message"] == "The model 'broken' could not be loaded: not a GGUF file"
    assert (await create(client, model="small"))["status"] == "completed"


async def test_unknown_models_map_to_the_default_when_asked(tmp_path: Path, models: Models) -> None:
    async for client in open_client(tmp_path, models, map_unknown_models=True):
        assert (await create(client, model="gpt-9"))["model"] == "small"


async def test_a_model_without_a_live_worker_is_a_503_for_foreground_creates_only(
    tmp_path: Path, models: Models
) -> None:
    async for client in open_client(tmp_path, models, BigModelUnserved):
        refused = await client.post("/v1/responses", json={"input": "hi", "model": "gpt-4o"})
        assert refused.status_code == 503
        assert refused.json()["error"] == {
            "message": "No worker serving the model 'big' is available to generate this response.",
            "type": "server_error",
            "param": "model",
            "code": "no_workers",
        }
        streamed = await client.post("/v1/responses", json={"input": "hi", "model": "big", "stream": True})
        assert streamed.status_code == 503
        assert (await create(client, model="small"))["status"] == "completed"
        queued = await create(client, model="big", background=True)
        assert queued["status"] == "queued", "a background create waits in the queue"
        workers = await client.get("/health/workers")
        assert workers.status_code == 503
        assert workers.json()["models"]["big"] == {"workers": False, "live_workers": 0}
        assert (await client.get("/ready")).json()["model_workers"] == {"small": 1, "big": 0, "broken": 1}
