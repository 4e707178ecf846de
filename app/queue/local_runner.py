"""llama.cpp engines in this process, each on a thread of its own; used by embedded mode and by workers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from app.generation.engine import LlamaEngine
from app.generation.types import Finish, GenerationFailed, GenerationOutput
from app.queue.base import GenerationJob


class LocalRun:
    """A job's generation, pumped by a task of its own: a consumer that goes away never stalls the model."""

    def __init__(self, job: GenerationJob, runner: LocalRunner) -> None:
        self.job = job
        self._runner = runner
        self._cancelled = threading.Event()
        self._pieces: asyncio.Queue[GenerationOutput] = asyncio.Queue()
        self._task = asyncio.create_task(self._pump(), name=f"generate {job.response_id}")

    def cancel(self) -> None:
        self._cancelled.set()

    def _produce(self, engine: LlamaEngine, loop: asyncio.AbstractEventLoop) -> None:
        """Runs on an engine's thread: hand every piece to the event loop as it decodes."""
        try:
            for piece in engine.generate(self.job.prompt_tokens, self.job.sampling, self._cancelled.is_set):
                loop.call_soon_threadsafe(self._pieces.put_nowait, piece)
        except Exception as error:  # the run must end with a terminal output whatever llama.cpp does
            loop.call_soon_threadsafe(self._pieces.put_nowait, GenerationFailed(f"generation failed: {error}"))

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        engine = await self._runner.idle.get()
        running = loop.run_in_executor(self._runner.executor, self._produce, engine, loop)
        # The engine is free again only when its thread is done, even if this task is cancelled.
        running.add_done_callback(lambda _: self._runner.idle.put_nowait(engine))
        await running

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        while True:
            piece = await self._pieces.get()
            yield piece
            if isinstance(piece, Finish | GenerationFailed):
                return


class LocalRunner:
    """A pool of engines (one per concurrent generation); jobs wait for a free one in arrival order."""

    def __init__(self, load_engine: Callable[[], LlamaEngine], concurrency: int = 1) -> None:
        self.engines = [load_engine() for _ in range(concurrency)]
        self.executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llama")
        self.idle: asyncio.Queue[LlamaEngine] = asyncio.Queue()
        for engine in self.engines:
            self.idle.put_nowait(engine)
        self._runs: dict[str, LocalRun] = {}

    def start(self, job: GenerationJob) -> LocalRun:
        run = LocalRun(job, self)
        self._runs[job.response_id] = run
        run._task.add_done_callback(lambda _: self._runs.pop(job.response_id, None))
        return run

    def cancel(self, response_id: str) -> None:
        run = self._runs.get(response_id)
        if run is not None:
            run.cancel()

    async def close(self) -> None:
        await asyncio.to_thread(self.executor.shutdown, wait=True, cancel_futures=True)
