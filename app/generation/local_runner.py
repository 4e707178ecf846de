"""The model in this process: jobs become requests to one batched LlamaEngine; used by embedded mode and
by workers."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable

from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.job import GenerationJob
from app.generation.registry import ModelSpec
from app.generation.renderers import RendererCache
from app.generation.types import EngineError, Finish, GenerationFailed, GenerationOutput, PromptRenderer
from app.observability.metrics import ACTIVE_SEQUENCES, FREE_SEQUENCES, PREFIX_CACHE_BYTES, SEQUENCE_WAITING_JOBS


def report_sequences(model: str, *, running: int, slots: int, prefix_cache_bytes: int) -> None:
    """A runner's state: generations decoding, sequences free, jobs waiting for one, saved prefix bytes."""
    ACTIVE_SEQUENCES.labels(model).set(min(running, slots))
    FREE_SEQUENCES.labels(model).set(max(slots - running, 0))
    SEQUENCE_WAITING_JOBS.labels(model).set(max(running - slots, 0))
    PREFIX_CACHE_BYTES.labels(model).set(prefix_cache_bytes)


class Mailbox:
    """Outputs from the engine thread to the event loop: what arrives before the loop gets to it (the tokens of
    every sequence of one decode step) is handed over in one wake-up, not one thread hop each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._outputs: deque[tuple[LocalRun, GenerationOutput]] = deque()
        self._wake_pending = False

    def post(self, run: LocalRun, output: GenerationOutput) -> None:
        """On the engine thread. deque.append is atomic; a wake-up already pending will find this output."""
        self._outputs.append((run, output))
        if not self._wake_pending:
            self._wake_pending = True
            self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        # Cleared before draining: an output posted after the last pop schedules a wake-up of its own.
        self._wake_pending = False
        outputs = self._outputs
        while outputs:
            run, output = outputs.popleft()
            run.deliver(output)


class LocalRun:
    """A job's generation: the engine thread hands each output to the event loop (through `mailbox`)."""

    def __init__(
        self, job: GenerationJob, engine: LlamaEngine, on_done: Callable[[], object], mailbox: Mailbox
    ) -> None:
        self.job = job
        self._on_done = on_done
        self._outputs: deque[GenerationOutput] = deque()
        #: The consumer's wait for the next output, while it waits (one future, not an asyncio.Queue's getter).
        self._waiter: asyncio.Future[None] | None = None
        self._request = GenerationRequest(
            job.prompt_tokens,
            job.sampling,
            emit=lambda output: mailbox.post(self, output),
            cache_scope=job.tenant,
            job_class=job.job_class,
            dialect=job.dialect,
        )
        engine.submit(self._request)

    def deliver(self, output: GenerationOutput) -> None:
        self._outputs.append(output)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if isinstance(output, Finish | GenerationFailed):
            self._on_done()

    def cancel(self) -> None:
        self._request.cancelled.set()

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        outputs = self._outputs
        while True:
            # What is already there is taken without a wait; a wait is one future that `deliver` resolves.
            if not outputs:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            output = outputs.popleft()
            yield output
            if isinstance(output, Finish | GenerationFailed):
                return


class LocalRunner:
    """Starts jobs on the engine, which runs up to its `slots` of them at once; the rest wait in the fair order."""

    def __init__(
        self, engine: LlamaEngine, renderers: RendererCache | None = None, spec: ModelSpec | None = None
    ) -> None:
        self.engine = engine
        #: Where its model's prompt renderer comes from (None: a runner that renders no tool rounds, a bench's).
        self._renderers = renderers
        self._spec = spec
        self._runs: dict[str, LocalRun] = {}
        #: One for the event loop that starts runs (created with the first): the engine's way back to it.
        self._mailbox: Mailbox | None = None
        #: The models whose gauges this runner set (one, in practice), zeroed when it closes.
        self._reported: set[str] = set()

    def start(self, job: GenerationJob) -> LocalRun:
        model = job.model

        def done() -> None:
            self._runs.pop(job.response_id, None)
            self._report(model)

        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = Mailbox(loop)
        run = LocalRun(job, self.engine, on_done=done, mailbox=self._mailbox)
        self._runs[job.response_id] = run
        self._report(model)
        return run

    def _report(self, model: str) -> None:
        self._reported.add(model)
        engine = self.engine
        report_sequences(model, running=len(self._runs), slots=engine.slots, prefix_cache_bytes=engine.cached_bytes)

    async def tokenize(self, model: str, text: str) -> list[int]:
        return self.engine.tokenize(text)

    async def renderer(self, model: str) -> PromptRenderer:
        if self._renderers is None or self._spec is None:
            raise EngineError(f"This runner of '{model}' was built without its prompt renderer.")
        return await self._renderers.get(self._spec)

    def cancel(self, response_id: str) -> None:
        run = self._runs.get(response_id)
        if run is not None:
            run.cancel()

    def loaded(self) -> set[str] | None:
        return None  # its one engine, loaded when it was built

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.close)
        for model in self._reported:  # an unloaded model holds no sequences and no saved prefixes
            report_sequences(model, running=0, slots=0, prefix_cache_bytes=0)
