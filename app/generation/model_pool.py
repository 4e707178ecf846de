"""The models of one process (the embedded server, or a worker): each loaded on first use, in a thread and
once however many requests want it, and unloaded least recently used first (idle ones only) when a budget of
models or bytes needs the room. A ModelRunner that routes each job to its model's runner.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from app.config import Settings
from app.generation.job import GenerationJob
from app.generation.registry import ModelRegistry, ModelSpec
from app.generation.renderers import RendererCache
from app.generation.runner import GenerationRun, ModelRunner
from app.generation.types import (
    EngineError,
    Finish,
    GenerationFailed,
    GenerationOutput,
    ModelLoadError,
    PromptRenderer,
)

logger = logging.getLogger(__name__)

#: How long a model that failed to load fails its requests at once before a request tries loading it again.
FAILED_LOAD_MEMORY_S = 30.0

#: Builds a model's runner (loads its weights): blocking, so it runs in a thread.
ModelLoader = Callable[[ModelSpec], ModelRunner]


@dataclass(eq=False)
class _Loaded:
    spec: ModelSpec
    runner: ModelRunner
    #: Generations (and takeover tokenisations) using it now: only a model with none is unloaded.
    active: int = 0
    last_used_s: float = 0.0


class PooledRun:
    """A job's generation: its model is loaded (or waited for) when the first output is asked for."""

    def __init__(self, pool: ModelPool, job: GenerationJob) -> None:
        self.job = job
        self._pool = pool
        self._run: GenerationRun | None = None
        self._model: _Loaded | None = None
        self._acquiring: asyncio.Task[_Loaded] | None = None
        self._cancelled = False
        self._ended: GenerationOutput | None = None

    def cancel(self) -> None:
        self._cancelled = True
        if self._acquiring is not None:
            self._acquiring.cancel()  # stop waiting for the model (its load goes on for the others)
        if self._run is not None:
            self._run.cancel()

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        # Called again after a cancel (the executor drains what is left): it goes on with the same run.
        if self._ended is not None:
            yield self._ended
            return
        if self._run is None:
            if self._cancelled:
                self._end(Finish("cancelled", len(self.job.prompt_tokens), 0, 0))
            else:
                self._acquiring = asyncio.create_task(self._pool.acquire(self.job.model))
                try:
                    self._model = await self._acquiring
                except ModelLoadError as error:
                    self._end(GenerationFailed(str(error)))
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if not self._cancelled or (current is not None and current.cancelling()):
                        raise  # this task itself is being cancelled, not the response
                    self._end(Finish("cancelled", len(self.job.prompt_tokens), 0, 0))
                finally:
                    self._acquiring = None
            if self._ended is not None:
                yield self._ended
                return
            assert self._model is not None
            self._run = self._model.runner.start(self.job)
            if self._cancelled:
                self._run.cancel()
        async for output in self._run.outputs():
            if isinstance(output, Finish | GenerationFailed):
                self._end(output)
            yield output

    def _end(self, output: GenerationOutput) -> None:
        self._ended = output
        self._pool.finished(self.job.response_id, self._model)
        self._model = None


@dataclass(eq=False)
class _Load:
    task: asyncio.Task[_Loaded]
    #: Callers waiting for it: the model is handed to them already held, so that nothing (another load making
    #: room) can see it idle between the load and their waking up.
    waiters: int = 0


class ModelPool:
    def __init__(
        self,
        registry: ModelRegistry,
        load: ModelLoader,
        *,
        max_models: int = 0,
        max_bytes: int = 0,
        failed_load_memory_s: float = FAILED_LOAD_MEMORY_S,
        renderers: RendererCache | None = None,
    ) -> None:
        self._registry = registry
        #: The models' prompt renderers, for the tool rounds run here (None: a pool that renders none).
        self._renderers = renderers
        self._load = load
        self._max_models = max_models
        self._max_bytes = max_bytes
        self._failed_load_memory_s = failed_load_memory_s
        self._loaded: dict[str, _Loaded] = {}
        self._loading: dict[str, _Load] = {}
        #: Model id -> (until when, why) for a recent failed load: its requests fail at once meanwhile.
        self._failed: dict[str, tuple[float, str]] = {}
        #: One load at a time: the budget is checked against what is loaded, never a guess of what will be.
        self._load_lock = asyncio.Lock()
        #: Set whenever a model stops being used: a load waiting for room looks again.
        self._released = asyncio.Event()
        #: The busy model a load waits to unload: new requests for it wait until `_draining_done` is set, or a
        #: steady stream of them would keep it busy (and the load waiting) for ever.
        self._draining: str | None = None
        self._draining_done = asyncio.Event()
        self._runs: dict[str, PooledRun] = {}

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        registry: ModelRegistry,
        *,
        max_models: int = 0,
        max_bytes: int = 0,
        renderers: RendererCache | None = None,
    ) -> ModelPool:
        """llama.cpp engines, under no budget unless given one: embedded mode passes the deployment's; a worker
        loads exactly the models it serves. `renderers`: the models' prompt renderers where the process has them
        already (embedded mode's API), else its own."""
        from app.generation.engine import LlamaEngine
        from app.generation.local_runner import LocalRunner
        from app.generation.tokenizer import ChatTokenizer

        return cls(
            registry,
            lambda spec: LocalRunner(LlamaEngine.from_settings(settings, spec)),
            max_models=max_models,
            max_bytes=max_bytes,
            renderers=renderers or RendererCache(ChatTokenizer.for_model),
        )

    def loaded(self) -> set[str]:
        return set(self._loaded)

    def start(self, job: GenerationJob) -> PooledRun:
        run = PooledRun(self, job)
        self._runs[job.response_id] = run
        return run

    def cancel(self, response_id: str) -> None:
        run = self._runs.get(response_id)
        if run is not None:
            run.cancel()

    async def tokenize(self, model: str, text: str) -> list[int]:
        loaded = await self.acquire(model)
        try:
            return await loaded.runner.tokenize(model, text)
        finally:
            self._release(loaded)

    async def renderer(self, model: str) -> PromptRenderer:
        """Built from the model's vocabulary alone: the model need not be loaded."""
        spec = self._registry.get(model)
        if self._renderers is None or spec is None:
            raise EngineError(f"No prompt renderer for the model '{model}' here.")
        return await self._renderers.get(spec)

    async def preload(self, model: str) -> None:
        """Load the model now (a worker, before it takes jobs)."""
        self._release(await self.acquire(model))

    def _spec(self, model: str) -> ModelSpec:
        # "": a job queued before jobs named their model runs on the default one.
        spec = self._registry.get(model) if model else self._registry.default
        if spec is None:
            raise ModelLoadError(model, "it is not declared here")
        return spec

    async def acquire(self, model: str) -> _Loaded:
        """The model, loaded (by this call, or by the one already loading it), marked in use until released."""
        spec = self._spec(model)
        while spec.id == self._draining:  # a load waits for it to go idle, to unload it
            await self._draining_done.wait()
        loaded = self._loaded.get(spec.id)
        if loaded is not None:
            loaded.active += 1
            loaded.last_used_s = time.monotonic()
            return loaded
        until_s, cause = self._failed.get(spec.id, (0.0, ""))
        if time.monotonic() < until_s:
            # It failed a moment ago: fail at once, rather than unload healthy models to fail again.
            raise ModelLoadError(spec.id, cause)
        load = self._loading.get(spec.id)
        if load is None:
            load = self._loading[spec.id] = _Load(asyncio.create_task(self._load_model(spec)))
        load.waiters += 1
        try:
            # Shielded: a request that goes away does not cancel the load the others wait for.
            return await asyncio.shield(load.task)
        except asyncio.CancelledError:
            if load.task.done() and not load.task.cancelled() and load.task.exception() is None:
                self._release(load.task.result())  # it was handed to us held
            else:
                load.waiters -= 1
            raise

    def finished(self, response_id: str, loaded: _Loaded | None) -> None:
        self._runs.pop(response_id, None)
        if loaded is not None:
            self._release(loaded)

    def _release(self, loaded: _Loaded) -> None:
        loaded.active -= 1
        loaded.last_used_s = time.monotonic()
        self._released.set()

    async def _load_model(self, spec: ModelSpec) -> _Loaded:
        try:
            async with self._load_lock:
                await self._make_room(spec)
                started = time.monotonic()
                try:
                    runner = await asyncio.to_thread(self._load, spec)
                except Exception as error:
                    logger.error("could not load model %s: %s", spec.id, error)
                    self._failed[spec.id] = (time.monotonic() + self._failed_load_memory_s, str(error))
                    raise ModelLoadError(spec.id, error) from error
                self._failed.pop(spec.id, None)
                # Held for every waiter in the same step that makes it visible: never idle before they run.
                waiters = self._loading[spec.id].waiters
                loaded = self._loaded[spec.id] = _Loaded(spec, runner, active=waiters, last_used_s=time.monotonic())
                logger.info("loaded model %s in %.1f s", spec.id, time.monotonic() - started)
                return loaded
        finally:
            self._loading.pop(spec.id, None)

    def _over_budget(self, spec: ModelSpec) -> bool:
        if not self._loaded:
            return False  # a model bigger than the whole budget still loads, alone
        too_many = bool(self._max_models) and len(self._loaded) + 1 > self._max_models
        used = sum(loaded.spec.size_bytes for loaded in self._loaded.values())
        too_big = bool(self._max_bytes) and used + spec.size_bytes > self._max_bytes
        return too_many or too_big

    async def _make_room(self, spec: ModelSpec) -> None:
        """Unload idle models, least recently used first, until `spec` fits the budget; while none is idle,
        wait for one to be."""
        try:
            while self._over_budget(spec):
                idle = [loaded for loaded in self._loaded.values() if loaded.active == 0]
                if not idle:
                    if self._draining not in self._loaded:
                        # New requests for the least recently used one wait, so that it does go idle.
                        self._draining = min(self._loaded.values(), key=lambda loaded: loaded.last_used_s).spec.id
                        self._draining_done.clear()
                    self._released.clear()
                    await self._released.wait()
                    continue
                victim = min(idle, key=lambda loaded: loaded.last_used_s)
                del self._loaded[victim.spec.id]
                logger.info("unloading model %s to make room for %s", victim.spec.id, spec.id)
                await victim.runner.close()
        finally:
            self._draining = None
            self._draining_done.set()

    async def close(self) -> None:
        tasks = [load.task for load in self._loading.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for loaded in list(self._loaded.values()):
            await loaded.runner.close()
        self._loaded.clear()
