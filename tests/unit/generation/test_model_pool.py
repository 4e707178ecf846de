"""The model pool with a fake loader: one load per model however many ask, loads off the event loop, LRU unloads
of idle models under a model or byte budget, and a model that fails to load failing only its own requests."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.config import Settings
from app.generation.engine import LlamaEngine
from app.generation.job import GenerationJob
from app.generation.model_pool import ModelPool
from app.generation.registry import ModelRegistry, ModelSpec
from app.generation.runner import ModelRunner
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams
from app.testing.fakes import FakeRunner


class Loader:
    """Counts loads and closes; a load waits for `gate` (to hold it in flight) and may fail."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.loads: list[str] = []
        self.closed: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.failing: set[str] = set()

    def __call__(self, spec: ModelSpec) -> ModelRunner:
        self.loads.append(spec.id)
        assert self.gate.wait(5)
        if spec.id in self.failing:
            raise RuntimeError("corrupt GGUF")
        runner = FakeRunner(self.delay_s)
        closed = self.closed

        async def close() -> None:
            closed.append(spec.id)

        runner.close = close  # type: ignore[method-assign]
        return runner


def registry(tmp_path: Path, sizes: dict[str, int]) -> ModelRegistry:
    specs = []
    for model, size in sizes.items():
        path = tmp_path / f"{model}.gguf"
        path.write_bytes(b"x" * size)
        specs.append(ModelSpec(id=model, path=path))
    return ModelRegistry(specs)


def job(model: str, number: int = 0) -> GenerationJob:
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_output_tokens=3)
    return GenerationJob(f"resp_{model}_{number}", [1, 2], sampling, {}, False, False, tenant="t", model=model)


async def run(pool: ModelPool, model: str, number: int = 0) -> list[GenerationOutput]:
    return [output async for output in pool.start(job(model, number)).outputs()]


async def test_a_model_loads_once_on_first_use_while_the_loop_runs_on(tmp_path: Path) -> None:
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1}), loader)
    assert pool.loaded() == set()
    loader.gate.clear()
    runs = [asyncio.create_task(run(pool, "a", number)) for number in range(3)]
    ticks = 0
    while not loader.loads:
        await asyncio.sleep(0.01)
    for _ in range(5):  # the loop is free while the load is held in its thread
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 5 and not any(task.done() for task in runs)
    loader.gate.set()
    results = await asyncio.gather(*runs)
    assert loader.loads == ["a"], "three requests, one load"
    assert all(isinstance(outputs[-1], Finish) and outputs[-1].reason == "length" for outputs in results)
    assert pool.loaded() == {"a"}
    await pool.close()
    assert loader.closed == ["a"]


async def test_the_least_recently_used_idle_model_is_unloaded_first(tmp_path: Path) -> None:
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1, "c": 1}), loader, max_models=2)
    await run(pool, "a")
    await run(pool, "b")
    await run(pool, "a")  # b is now the least recently used
    await run(pool, "c")
    assert pool.loaded() == {"a", "c"} and loader.closed == ["b"]
    await run(pool, "b")
    assert pool.loaded() == {"c", "b"} and loader.closed == ["b", "a"]
    assert loader.loads == ["a", "b", "c", "b"]


async def test_a_byte_budget_unloads_until_the_new_model_fits(tmp_path: Path) -> None:
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 400, "b": 400, "big": 900}), loader, max_bytes=1000)
    await run(pool, "a")
    await run(pool, "b")
    assert pool.loaded() == {"a", "b"}
    await run(pool, "big")
    assert pool.loaded() == {"big"} and sorted(loader.closed) == ["a", "b"]


async def test_a_busy_model_is_never_unloaded_the_load_waits_for_it(tmp_path: Path) -> None:
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1}), Loader(delay_s=0.05), max_models=1)
    long_run = asyncio.create_task(run(pool, "a"))
    while pool.loaded() != {"a"}:
        await asyncio.sleep(0.01)
    outputs_b = await run(pool, "b")
    assert long_run.done() and isinstance((await long_run)[-1], Finish)
    assert isinstance(outputs_b[-1], Finish) and pool.loaded() == {"b"}


async def test_a_model_that_fails_to_load_fails_its_requests_only(tmp_path: Path) -> None:
    loader = Loader()
    loader.failing.add("bad")
    pool = ModelPool(registry(tmp_path, {"good": 1, "bad": 1}), loader, max_models=1, failed_load_memory_s=0.2)
    outputs = await run(pool, "bad")
    assert len(outputs) == 1 and isinstance(outputs[0], GenerationFailed)
    assert outputs[0].message == "The model 'bad' could not be loaded: corrupt GGUF"
    assert isinstance((await run(pool, "good"))[-1], Finish)
    # Failed a moment ago: its requests fail at once, the same way, and the healthy model stays loaded.
    outputs = await run(pool, "bad", 1)
    assert [output.message for output in outputs if isinstance(output, GenerationFailed)] == [
        "The model 'bad' could not be loaded: corrupt GGUF"
    ]
    assert loader.loads == ["bad", "good"] and pool.loaded() == {"good"} and loader.closed == []
    loader.failing.clear()  # a later request tries again
    await asyncio.sleep(0.25)
    assert isinstance((await run(pool, "bad", 2))[-1], Finish)
    assert loader.loads == ["bad", "good", "bad"]


async def test_two_cold_requests_for_two_models_under_a_budget_of_one_both_finish(tmp_path: Path) -> None:
    # Regression: the second load used to unload the first before its request woke up, and the two models
    # evicted each other for ever (thousands of loads, neither request finished).
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1}), loader, max_models=1)
    results = await asyncio.wait_for(asyncio.gather(run(pool, "a"), run(pool, "b")), 5)
    assert all(isinstance(outputs[-1], Finish) and outputs[-1].reason == "length" for outputs in results)
    assert sorted(loader.loads) == ["a", "b"]


async def test_a_load_waiting_for_room_is_not_starved_by_new_requests_for_the_busy_model(tmp_path: Path) -> None:
    loader = Loader(delay_s=0.03)
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1}), loader, max_models=1)
    first_a = asyncio.create_task(run(pool, "a"))
    while pool.loaded() != {"a"}:
        await asyncio.sleep(0.005)
    load_b = asyncio.create_task(run(pool, "b"))
    later_a: list[asyncio.Task[list[GenerationOutput]]] = []
    while not load_b.done() and len(later_a) < 200:  # a new request for a always in flight
        later_a.append(asyncio.create_task(run(pool, "a", len(later_a) + 1)))
        await asyncio.sleep(0.01)
    assert load_b.done(), "b never loaded: the requests for a kept it busy"
    results = await asyncio.wait_for(asyncio.gather(first_a, load_b, *later_a), 5)
    assert all(isinstance(outputs[-1], Finish) for outputs in results)
    assert loader.loads[:3] == ["a", "b", "a"] and len(loader.loads) <= 4


async def test_a_request_cancelled_while_its_model_loads_ends_at_once(tmp_path: Path) -> None:
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 1, "b": 1}), loader, max_models=1)
    loader.gate.clear()
    waiting = pool.start(job("a"))
    outputs_task: asyncio.Task[GenerationOutput] = asyncio.create_task(anext(waiting.outputs()))
    while not loader.loads:
        await asyncio.sleep(0.005)
    pool.cancel("resp_a_0")
    assert await asyncio.wait_for(outputs_task, 1) == Finish("cancelled", 2, 0, 0)
    loader.gate.set()  # the load goes on, and leaves the model idle: b may unload it
    assert isinstance((await asyncio.wait_for(run(pool, "b"), 5))[-1], Finish)
    assert loader.loads == ["a", "b"] and pool.loaded() == {"b"}


async def test_a_cancel_before_the_model_loads_ends_the_run_without_it(tmp_path: Path) -> None:
    loader = Loader()
    pool = ModelPool(registry(tmp_path, {"a": 1}), loader)
    started = pool.start(job("a"))
    pool.cancel("resp_a_0")
    outputs = [output async for output in started.outputs()]
    assert outputs == [Finish("cancelled", 2, 0, 0)] and loader.loads == []


async def test_takeover_tokens_come_from_the_jobs_model(tmp_path: Path) -> None:
    pool = ModelPool(registry(tmp_path, {"a": 1}), Loader())
    assert await pool.tokenize("a", "hi") == [ord("h"), ord("i")]
    with pytest.raises(Exception, match="'nope' could not be loaded: it is not declared here"):
        await pool.tokenize("nope", "hi")


class StubEngine:
    def close(self) -> None:
        return None


async def test_the_budgets_bind_only_the_pool_given_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker builds its pool without them: it keeps every model it serves, whatever the embedded budget says.
    monkeypatch.setattr(LlamaEngine, "from_settings", classmethod(lambda cls, settings, spec: StubEngine()))
    settings = Settings(max_loaded_models=1, _env_file=None)  # type: ignore[call-arg]
    worker_pool = ModelPool.from_settings(settings, registry(tmp_path, {"a": 1, "b": 1}))
    await worker_pool.preload("a")
    await worker_pool.preload("b")
    assert worker_pool.loaded() == {"a", "b"}
    await worker_pool.close()
    embedded_pool = ModelPool.from_settings(settings, registry(tmp_path, {"a": 1, "b": 1}), max_models=1)
    await embedded_pool.preload("a")
    await embedded_pool.preload("b")
    assert embedded_pool.loaded() == {"b"}
    await embedded_pool.close()
