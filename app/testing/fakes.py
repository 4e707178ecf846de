"""A deterministic stand-in for the model (no llama.cpp), for unit tests of everything above the engine and for the
benchmarks that measure the server without a model: a renderer, a runner, and the app's generation built on them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from app.config import Settings
from app.db.session import Database
from app.generation.job import GenerationJob, class_weights
from app.generation.prompt import ChatMessage
from app.generation.registry import ModelRegistry
from app.generation.renderers import RendererCache
from app.generation.runner import ModelRunner
from app.generation.types import ContextTooLong, Finish, GenerationFailed, GenerationOutput, PromptRenderer, ScoredPiece
from app.hosted_tools.calls import HostedCaller
from app.ids import new_id
from app.jobs.executor import JobExecutor
from app.limits.limiter import TenantRateLimits
from app.main import GenerationFactory
from app.mcp.calls import McpCaller
from app.transport.base import GenerationQueue
from app.transport.inprocess import InProcessQueue
from app.transport.memory_bus import MemoryBus

#: What the fake model says, one word a token.
FAKE_REPLY = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


class FakeClock:
    """Seconds that pass only when a test says so (`now_s += ...`): a clock to inject (the rate limits' buckets)."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class FakeRenderer:
    """One token a word; token ids are word lengths, which is enough to count and to truncate."""

    def __init__(self, n_ctx: int = 256) -> None:
        self.n_ctx = n_ctx
        self.reasoning_tags: tuple[str, str] | None = None
        self.supports_tools = False
        self.structured = False
        #: The model family its output is read in (app/generation/dialects).
        self.dialect = "hermes"
        #: What opens_reasoning answers (True: as a template whose generation prompt opens the reasoning).
        self.reasoning_opened = False
        self.rendered: list[list[ChatMessage]] = []
        #: Each prompt it made, and the messages it made it of (what `read` gives back).
        self.prompts: dict[tuple[int, ...], list[ChatMessage]] = {}
        self.template_options: list[Mapping[str, Any] | None] = []
        #: What grammar_builds answers (False: as llama.cpp refusing a grammar).
        self.grammars_build = True
        self.grammars: list[str] = []
        #: Words every render ends with, as a chat template's opening of the assistant's turn (none by default).
        self.generation_prompt = ""

    @property
    def generation_prompt_tokens(self) -> tuple[int, ...]:
        return tuple(len(word) for word in self.generation_prompt.split())

    def opens_reasoning(self, prompt: Sequence[int], opening: str) -> bool:
        return self.reasoning_opened

    def grammar_builds(self, grammar: str) -> bool:
        self.grammars.append(grammar)
        return self.grammars_build

    def read(self, tokens: Sequence[int]) -> str:
        """A prompt it made, as text: a line `role: content` a message (with its calls), then what was appended to
        it after (a takeover's written text: FakeRunner.tokenize's one token a character)."""
        for length in range(len(tokens), -1, -1):
            messages = self.prompts.get(tuple(tokens[:length]))
            if messages is not None:
                lines = "".join(f"{message.role}: {message.text}\n" for message in messages)
                return lines + "".join(chr(token) for token in tokens[length:])
        raise KeyError("not a prompt this renderer made")

    def render(self, messages: Sequence[ChatMessage]) -> list[int]:
        words = [len(word) for message in messages for word in f"{message.role} {message.content}".split()]
        return [*words, *self.generation_prompt_tokens]

    def render_within_context(
        self,
        system: ChatMessage | None,
        conversation: Sequence[ChatMessage],
        *,
        truncate: bool,
        template_options: Mapping[str, Any] | None = None,
    ) -> list[int]:
        self.template_options.append(template_options)
        head = [system] if system else []
        for start in range(len(conversation) if truncate else 1):
            messages = [*head, *conversation[start:]]
            tokens = self.render(messages)
            if len(tokens) + 16 <= self.n_ctx:
                self.rendered.append(messages)
                self.prompts[tuple(tokens)] = messages
                return tokens
        raise ContextTooLong(len(tokens), self.n_ctx)


def scored(piece: str, top_n: int) -> ScoredPiece:
    """A fake token's logprob: -len(piece)/10, and alternatives that spell it in capitals, lower and lower."""
    logprob = -len(piece) / 10
    top = tuple((piece.upper().encode() + b"!" * rank, logprob - rank) for rank in range(top_n))
    return ScoredPiece(piece, piece.encode(), logprob, top)


class FakeRun:
    def __init__(
        self,
        job: GenerationJob,
        reply: list[str],
        delay_s: float,
        fail_after: int | None,
        separator: str = " ",
        crash_after: int | None = None,
    ) -> None:
        self.job = job
        self.crash_after = crash_after
        self.separator = separator
        self.reply = reply
        self.fail_after = fail_after
        self.delay_s = delay_s
        self.cancelled = False
        self.produced = 0
        #: Prompt tokens its Finish reports reused (FakeRunner.cached_tokens).
        self.cached = 0

    def cancel(self) -> None:
        self.cancelled = True

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        budget = min(self.job.sampling.max_output_tokens or len(self.reply), len(self.reply))
        if self.job.sampling.prefill_only:  # a warm-up reads its prompt and says nothing
            budget = 0
        if self.crash_after == 0:  # dies in prefill, before any text
            await asyncio.sleep(self.delay_s)
            raise RuntimeError("the fake worker died")
        while self.produced < budget and not self.cancelled:
            await asyncio.sleep(self.delay_s)
            word = self.reply[self.produced]
            self.produced += 1
            piece = word if self.produced == 1 else f"{self.separator}{word}"
            yield piece if self.job.sampling.top_logprobs is None else scored(piece, self.job.sampling.top_logprobs)
            if self.produced == self.fail_after:
                yield GenerationFailed("the fake model broke")
                return
            if self.produced == self.crash_after:
                raise RuntimeError("the fake worker died")
        if self.cancelled:
            reason = "cancelled"
        else:
            reason = "length" if budget < len(self.reply) and not self.job.sampling.prefill_only else "stop"
        yield Finish(reason, len(self.job.prompt_tokens), self.cached, self.produced)  # type: ignore[arg-type]


class FakeRunner:
    """A ModelRunner whose model says FAKE_REPLY (or `reply`), one word a token, `delay_s` apart."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.reply = list(FAKE_REPLY)
        #: After this many words the run ends with GenerationFailed instead of a Finish.
        self.fail_after: int | None = None
        #: After this many words (0: before any) the run raises, as if its worker died (its lease is left to expire).
        self.crash_after: int | None = None
        #: Put between the reply's pieces; "" replays them exactly (to split tags across pieces).
        self.separator = " "
        #: Replies for the next runs, one each, first first (a tool loop's rounds); then `reply` again.
        self.replies: list[list[str]] = []
        #: crash_after for one run only: the index of the run (0: the first started) -> after how many words.
        self.crash_in_run: dict[int, int] = {}
        #: Prompt tokens each run reports reused (as a prefix-cache hit would), capped at all but the last.
        self.cached_tokens = 0
        #: The renderers a tool round's prompt is rendered with (fake_generation gives it the app's): by model,
        #: else the default one.
        self.prompt_renderer: PromptRenderer = FakeRenderer()
        self.prompt_renderers: dict[str, PromptRenderer] = {}
        self.jobs: list[GenerationJob] = []
        self.runs: dict[str, FakeRun] = {}

    def start(self, job: GenerationJob) -> FakeRun:
        self.jobs.append(job)
        reply = self.replies.pop(0) if self.replies else self.reply
        crash_after = self.crash_in_run.get(len(self.jobs) - 1, self.crash_after)
        run = FakeRun(job, reply, self.delay_s, self.fail_after, self.separator, crash_after)
        run.cached = min(self.cached_tokens, max(0, len(job.prompt_tokens) - 1))
        self.runs[job.response_id] = run
        return run

    async def tokenize(self, model: str, text: str) -> list[int]:
        return [ord(character) for character in text]

    async def renderer(self, model: str) -> PromptRenderer:
        return self.prompt_renderers.get(model, self.prompt_renderer)

    def cancel(self, response_id: str) -> None:
        if response_id in self.runs:
            self.runs[response_id].cancel()

    def loaded(self) -> set[str] | None:
        return None

    async def close(self) -> None:
        return None


def fake_generation(
    renderer: FakeRenderer,
    runner: ModelRunner,
    renderers: Mapping[str, PromptRenderer] | None = None,
    *,
    places: int = 0,
) -> GenerationFactory:
    """create_app's generation on the fake model, for every served model (`renderers`: model id -> its own
    renderer, where it needs one): jobs run in this process, as in embedded mode, `places` of a model's at once
    (0: all at once)."""

    async def build(
        settings: Settings, registry: ModelRegistry, database: Database, limits: TenantRateLimits
    ) -> tuple[RendererCache, GenerationQueue]:
        cache = RendererCache(lambda spec: (renderers or {}).get(spec.id, renderer))
        if isinstance(runner, FakeRunner):  # its tool rounds render with the app's renderers
            runner.prompt_renderer, runner.prompt_renderers = renderer, dict(renderers or {})
        return cache, in_process_queue(runner, database, settings, limits, places=places)

    return build


def in_process_queue(
    runner: ModelRunner,
    database: Database,
    settings: Settings,
    limits: TenantRateLimits | None = None,
    *,
    places: int = 0,
) -> InProcessQueue:
    """Embedded mode's queue on `runner`: its jobs run by this process's executor (which charges each
    generation's output tokens to `limits`), `places` at once (0: all)."""
    bus = MemoryBus()
    charge = limits.charge_tokens if limits is not None else None
    executor = JobExecutor(
        runner,
        database,
        bus,
        owner=new_id("node"),
        lease_s=settings.lease_s,
        charge_tokens=charge,
        mcp=McpCaller.from_settings(settings, database),
        hosted=HostedCaller(database, settings),
    )
    return InProcessQueue(executor, bus, places=places, weights=class_weights(settings))
