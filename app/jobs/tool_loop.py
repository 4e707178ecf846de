"""The tool loop inside one response: the model calls an MCP server's tool (or a hosted tool: file_search,
web_search, which this process runs itself), this process calls it, and the model goes on from the result, in
the same response, until it answers without a call or the calls run out.

Each round is one model run; its prompt is the conversation the first was rendered from (McpSetup.prompt) with
the response's items so far after it (its reasoning, text, calls and their results), rendered again by the
model's template where the model runs: the calls and results read as the template writes them, and the
engine's prefix cache reuses the tokens the new prompt shares with the last (all of them before the round's
text, unless the template writes an earlier turn differently once a later one follows: then it reads from
there). A cancel stops the model or the call in flight (LoopRun.cancel).

A background job records each round and each call's end in its progress before it goes on (app/jobs/progress.py):
a takeover replays them (`replay`), never making a recorded call again, and fails the calls left in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from app.events.assembler import ResponseAssembler
from app.events.mcp_items import failed_call
from app.generation.chat.template import TemplateRenderError
from app.generation.job import GenerationJob
from app.generation.prompt import PromptContext
from app.generation.runner import GenerationRun, ModelRunner
from app.generation.types import ContextTooLong, Finish, GenerationFailed, GenerationOutput
from app.hosted_tools.calls import HostedCaller
from app.hosted_tools.failures import HostedCallFailed
from app.jobs.progress import ProgressLog, RecordedRound, call_entry, open_approved, round_entry
from app.mcp.calls import McpCaller
from app.mcp.client import McpFailed
from app.mcp.servers import McpSetup
from app.schemas.events import ResponseEvent
from app.schemas.items import StoredMcpCall
from app.schemas.tools import hosted_tool_of

NOT_CALLED = "Not called: this response reached its max_tool_calls ({limit})."
NOT_CALLED_CANCELLED = "Not called: the response was cancelled."
#: A call in flight when its worker died: it may have run (a tool need not be idempotent), so it is not made again.
STOPPED = "The worker running this call stopped; it was not retried."


class LoopRun:
    """The generation of a response that may call tools (a GenerationRun): the current round's model run, and
    the tool call in flight between rounds. What a cancel, a lost lease or a shutdown stops."""

    def __init__(self, run: GenerationRun) -> None:
        self.run = run
        self.cancelled = False
        self.call: asyncio.Task[str] | None = None

    def outputs(self) -> AsyncIterator[GenerationOutput]:
        return self.run.outputs()

    def cancel(self) -> None:
        self.cancelled = True
        self.run.cancel()
        if self.call is not None:
            self.call.cancel()


class ApprovedCallsFirst:
    """The first run of a response that makes the calls its client approved: no model run, its Finish at once,
    so that the first tool round makes those calls (ToolLoop.approved_round) and the model goes on from them."""

    def __init__(self) -> None:
        self.cancelled = False

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        yield Finish("cancelled" if self.cancelled else "stop", 0, 0, 0)

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(frozen=True, slots=True)
class RoundOutlet:
    """Where a round goes (the execution's): the assembler that grows the response, the progress log, the events
    out (`emit`), and the progress stored now (`record`) so that a takeover goes on from there."""

    assembler: ResponseAssembler
    progress: ProgressLog
    emit: Callable[[list[ResponseEvent]], Awaitable[None]]
    record: Callable[[], Awaitable[None]]


class ToolLoop:
    def __init__(
        self, job: GenerationJob, setup: McpSetup, caller: McpCaller | None, hosted: HostedCaller | None = None
    ) -> None:
        self.job = job
        self.setup = setup
        self.caller = caller
        #: Runs the hosted tools' calls (file_search, web_search): None where this process cannot.
        self.hosted = hosted
        self.calls_made = 0
        #: A call was refused for the limit: the response ends after this round.
        self.exhausted = False
        #: A takeover: the calls an earlier run left in flight, failed (not made again); close_stopped sends them.
        self.stopped: list[StoredMcpCall] = []
        #: A takeover found rounds an earlier run recorded (the approved calls' round among them).
        self.replayed = False
        #: Usage of the rounds before the current one (input tokens count every round's prompt).
        self.input_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0

    @classmethod
    def of(cls, job: GenerationJob, caller: McpCaller | None, hosted: HostedCaller | None = None) -> ToolLoop | None:
        return cls(job, McpSetup.from_payload(job.mcp), caller, hosted) if job.mcp else None

    def start(self, runner: ModelRunner, job: GenerationJob, *, resumed: bool) -> GenerationRun:
        """The response's first run: the model's, or none when the client approved calls (made first). A
        takeover makes them only if no round was recorded (their round is recorded before any call is made: once
        it is, `replay` took them as made or failed)."""
        if resumed and self.replayed:
            self.setup.approved = []
        return ApprovedCallsFirst() if self.setup.approved else runner.start(job)

    def approved_round(
        self, assembler: ResponseAssembler
    ) -> tuple[list[ResponseEvent], list[StoredMcpCall], str] | None:
        """The calls the client approved, once, before the model's first round (see open_approved)."""
        if not self.setup.approved:
            return None
        approved, self.setup.approved = self.setup.approved, []
        return open_approved(assembler, approved)

    async def call(self, run: LoopRun, call: StoredMcpCall) -> StoredMcpCall:
        """Call `call`'s tool (unless the response reached its limit): the call with its output or error."""
        if self.calls_made >= self.setup.max_calls:
            self.exhausted = True
            return failed_call(call, NOT_CALLED.format(limit=self.setup.max_calls))
        hosted = hosted_tool_of(call.server_label)
        if (self.caller if hosted is None else self.hosted) is None:
            return failed_call(call, f"This process cannot call {'MCP servers' if hosted is None else hosted}.")
        if run.cancelled:  # a cancel that came during an earlier call of the round, or while it was recorded
            return failed_call(call, NOT_CALLED_CANCELLED)
        self.calls_made += 1
        run.call = asyncio.create_task(self._called(call, hosted))
        try:
            output = await run.call
        except McpFailed as error:
            return failed_call(call, str(error), execution=error.execution)
        except HostedCallFailed as error:
            return failed_call(call, str(error))
        except asyncio.CancelledError:
            if not run.cancelled:
                raise  # the job itself is stopping
            return failed_call(call, "Cancelled before the tool answered.")
        finally:
            run.call = None
        return call.model_copy(update={"status": "completed", "output": output, "error": None})

    async def _called(self, call: StoredMcpCall, hosted: str | None) -> str:
        """The call made: by its MCP server, or (a hosted tool's) here, with the tool's configuration."""
        if hosted is not None:
            assert self.hosted is not None
            return await self.hosted.call(hosted, self.job.tenant, self.setup.hosted[hosted], call.arguments)
        assert self.caller is not None
        server = self.setup.server(call.server_label)
        return await self.caller.call(server, self.job.tenant, call.name, call.arguments)

    async def replay(self, runner: ModelRunner, rounds: list[RecordedRound], assembler: ResponseAssembler) -> None:
        """A takeover: the rounds an earlier run recorded (in `assembler`, as the replay left it), taken as made (no
        call made again), so that `job` is the round after them. The calls they left in flight fail (STOPPED),
        for close_stopped to send."""
        refused = NOT_CALLED.format(limit=self.setup.max_calls)
        self.replayed = bool(rounds)
        stopped: dict[str, StoredMcpCall] = {}
        for recorded in rounds:
            for call in recorded.calls:
                if call.status == "in_progress":
                    stopped[call.id] = failed_call(call, STOPPED)
                elif call.error is not None and call.error.get("message") == refused:
                    self.exhausted = True
            self.calls_made += len(recorded.calls)
            self.count(recorded.finish)
        self.stopped += stopped.values()
        if rounds:
            items = [
                stopped[item["id"]].model_dump(mode="json") if item.get("id") in stopped else item
                for item in self._round_items(assembler)
            ]
            if isinstance(await self.next_round(runner, rounds[-1].finish, items), GenerationFailed):
                self.exhausted = True

    async def close_stopped(self, outlet: RoundOutlet) -> None:
        """A takeover: the calls an earlier run left in flight end failed, recorded with their events."""
        for call in self.stopped:
            outlet.progress.pieces.append(call_entry(call))
            await outlet.emit(outlet.assembler.mcp_call_done(call))
        if self.stopped:
            await outlet.record()
        self.stopped = []

    async def round(
        self, run: LoopRun, finish: Finish, runner: ModelRunner, outlet: RoundOutlet
    ) -> Finish | GenerationFailed | None:
        """The model's turn ended: if it called MCP tools, call them and start the next round in `run` (None);
        else (an answer, a cut, a cancel, the limit reached) the Finish the response ends with, the usage of
        every round in it (or its failure, when the next round's prompt cannot be rendered)."""
        if finish.reason != "stop" or run.cancelled:
            return self.total(finish)
        approved = self.setup.approved
        opened = self.approved_round(outlet.assembler) or outlet.assembler.mcp_round()
        if opened is None:
            return self.total(finish)
        events, calls, _ = opened
        # Stored before any call is made, and each call's end before the next: a takeover goes on from there.
        outlet.progress.pieces.append(round_entry(finish, approved))
        await outlet.emit(events)
        await outlet.record()
        done = []
        for call in calls:
            ended = await self.call(run, call)
            done.append(ended)
            outlet.progress.pieces.append(call_entry(ended))
            await outlet.emit(outlet.assembler.mcp_call_done(ended))
            await outlet.record()
        if run.cancelled or self.ends_after(outlet.assembler):
            # Ends here (a cancel, a call over the limit, calls that wait for approval, or client calls that wait
            # for their outputs): with what the rounds used, and no more output.
            return self.total(replace(finish, reason="cancelled" if run.cancelled else "stop"))
        self.count(finish)
        job = await self.next_round(runner, finish, self._round_items(outlet.assembler))
        if not isinstance(job, GenerationJob):
            return job
        run.run = runner.start(job)
        if run.cancelled:  # a cancel that came while the run started
            run.run.cancel()
        return None

    def ends_after(self, assembler: ResponseAssembler) -> bool:
        """The response ends after its last round (and a takeover after the recorded ones): a call was refused
        for the limit, a call waits for the client's approval, or the model called client tools beside MCP ones
        (the response ends with those, for the client to run; its function_call_output goes on from there)."""
        return self.exhausted or assembler.awaits_approval or bool(assembler.client_calls)

    def count(self, finish: Finish) -> None:
        """A round ended: its usage counts in the response's."""
        self.input_tokens += finish.prompt_tokens
        self.cached_tokens += finish.cached_tokens
        self.output_tokens += finish.output_tokens

    def _round_items(self, assembler: ResponseAssembler) -> list[dict[str, Any]]:
        """The items the rounds added to the response (after those that led it: a compaction, the listings)."""
        return assembler.output_so_far()[len(self.job.leading_items) :]

    async def next_round(
        self, runner: ModelRunner, finish: Finish, items: list[dict[str, Any]]
    ) -> GenerationJob | Finish | GenerationFailed:
        """The job of the next round: the conversation with the response's items so far after it, rendered by
        the model's template, the output budget shrunk by what this round wrote, the forced call (if any) no
        longer forced. What the response ends with instead when that prompt cannot be made: `length` (it does
        not fit the context), failed (the template refuses the calls, e.g. parallel ones)."""
        if not self.setup.prompt:  # queued by a server from before tool rounds were rendered where the model runs
            return GenerationFailed("This response was started by an older server version; create it again.")
        context = PromptContext.from_payload(self.setup.prompt)
        renderer = await runner.renderer(self.job.model)
        try:
            tokens = await asyncio.to_thread(
                renderer.render_within_context,
                context.system,
                context.with_items(items),
                truncate=context.truncate,
                template_options=context.template_options,
            )
        except ContextTooLong:
            return self.total(replace(finish, reason="length"), counted=True)
        except TemplateRenderError as error:
            model = self.job.model
            return GenerationFailed(f"The chat template of model '{model}' cannot go on from this tool round: {error}")
        cap = self.job.sampling.max_output_tokens
        sampling = replace(
            self.job.sampling,
            max_output_tokens=None if cap is None else max(cap - finish.output_tokens, 1),
            grammar=self.setup.answer_grammar,
        )
        self.job = replace(self.job, prompt_tokens=tokens, sampling=sampling)
        return self.job

    def total(self, finish: Finish, *, counted: bool = False) -> Finish:
        """The last round's Finish with the usage of every round (`counted`: the rounds' usage has it already)."""
        if counted:
            return Finish(finish.reason, self.input_tokens, self.cached_tokens, self.output_tokens)
        if not self.input_tokens and not self.output_tokens:
            return finish
        return Finish(
            finish.reason,
            self.input_tokens + finish.prompt_tokens,
            self.cached_tokens + finish.cached_tokens,
            self.output_tokens + finish.output_tokens,
        )
