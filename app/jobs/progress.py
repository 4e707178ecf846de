"""What a run of a job has produced, kept so that a takeover goes on from it: the text pieces and the ids given out,
the steps of its tool loop between them (a round that called tools, each call's end), how much of them is stored,
and the assembler rebuilt from a stored progress (the same pieces with the same ids rebuild the same events,
sequence numbers included)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app.events.assembler import ResponseAssembler
from app.generation.job import GenerationJob
from app.generation.tool_calls import render_call
from app.generation.types import Finish
from app.ids import new_id
from app.jobs.repository import Progress, ProgressEntry, ProgressStep
from app.schemas.events import ResponseEvent
from app.schemas.items import StoredMcpCall
from app.schemas.responses import ResponseObject

_ROUND = "mcp_round"
_CALL = "mcp_call"


def round_entry(finish: Finish, approved: list[dict[str, str]]) -> dict[str, Any]:
    """The model's turn ended in MCP calls (opened in progress, not made yet): its usage, for the loop's total; or
    the round of the calls the client `approved` (made before the model's first run), which its text does not
    hold, so that a replay opens them again."""
    usage = {"prompt": finish.prompt_tokens, "cached": finish.cached_tokens, "output": finish.output_tokens}
    return {_ROUND: {**usage, "approved": approved} if approved else usage}


def open_approved(
    assembler: ResponseAssembler, approved: list[dict[str, str]]
) -> tuple[list[ResponseEvent], list[StoredMcpCall], str]:
    """The calls the client approved, opened as the model's calls are (assembler.mcp_round): the events, the calls,
    and the round's text, those calls as the model would have written them."""
    events, calls = assembler.open_calls(approved)
    return events, calls, "".join(render_call(call.name, call.arguments) for call in calls)


def call_entry(call: StoredMcpCall) -> dict[str, Any]:
    """A call of the last round ended (completed or failed): a takeover never makes it again."""
    return {_CALL: call.model_dump(mode="json")}


@dataclass(slots=True)
class RecordedRound:
    """A tool round an earlier run recorded: the text it continues the prompt with, its usage, and its calls as
    far as they got (`in_progress`: sent to the server, never known to have answered)."""

    text: str
    finish: Finish
    calls: list[StoredMcpCall]


@dataclass(slots=True)
class Replay:
    """A stored progress replayed: the assembler as the last run left it, the log of it, the tool rounds, and the
    text the model wrote since the last of them (the round in progress)."""

    assembler: ResponseAssembler
    log: ProgressLog
    rounds: list[RecordedRound] = field(default_factory=list)
    text: str = ""


class IdLog:
    """The ids an assembler gives out, recorded: a takeover that replays the same pieces gets the same ids, so
    the events it rebuilds are the ones already sent."""

    def __init__(self, recorded: list[str]) -> None:
        self.recorded = list(recorded)
        self._next = 0

    def __call__(self, prefix: str) -> str:
        if self._next == len(self.recorded):
            self.recorded.append(new_id(prefix))
        self._next += 1
        return self.recorded[self._next - 1]


def job_assembler(job: GenerationJob, ids: IdLog) -> ResponseAssembler:
    """The assembler a run of `job` grows its Response with, taking its item ids from `ids`."""
    return ResponseAssembler(
        ResponseObject.model_validate(job.response),
        job.functions,
        job.reasoning_tags,
        custom_tools=set(job.custom_tools),
        tool_types=set(job.tool_types),
        encrypted_reasoning=job.encrypted_reasoning,
        leading_items=job.leading_items,
        logprobs=job.sampling.top_logprobs is not None,
        parallel_tool_calls=job.parallel_tool_calls,
        ids=ids,
        announced=job.announced,
        mcp_tools=dict(job.mcp["tools"]) if job.mcp else None,
        mcp_approvals=set(job.mcp.get("approvals", [])) if job.mcp else None,
        prefill_only=job.sampling.prefill_only,
        compaction_trigger=job.compaction_trigger,
        dialect=job.dialect,
        reasoning_open=job.reasoning_open,
        parameter_types=job.parameter_types,
    )


def replay_progress(job: GenerationJob, progress: Progress) -> Replay:
    """What the last run left: its assembler, the log of what it had produced (all of it stored), its rounds."""
    log = ProgressLog(IdLog(progress.ids), stored=progress)
    assembler = job_assembler(job, log.ids)
    assembler.response.status = "in_progress"
    assembler.start()
    replay = Replay(assembler, log)
    texts: list[str] = []
    for piece in progress.pieces:
        log.pieces.append(piece)
        if isinstance(piece, str):
            assembler.text(piece)
            texts.append(piece)
        elif _ROUND in piece:
            usage = piece[_ROUND]
            # The same text (or approvals) with the same ids opens the same calls.
            opened = open_approved(assembler, usage["approved"]) if "approved" in usage else assembler.mcp_round()
            assert opened is not None, "a recorded tool round that the text does not call"
            _, calls, text = opened
            replay.rounds.append(
                RecordedRound(text, Finish("stop", usage["prompt"], usage["cached"], usage["output"]), calls)
            )
            texts = []
        else:
            ended = StoredMcpCall.model_validate(piece[_CALL])
            assembler.mcp_call_done(ended)
            last = replay.rounds[-1]
            last.calls = [ended if call.id == ended.id else call for call in last.calls]
    replay.text = "".join(texts)
    return replay


class ProgressLog:
    """A run's text pieces (given to the assembler, in order) and ids, and how many of each are stored, in how
    many progress rows: each store appends only what is new (a rewrite on every event would grow with the square
    of the length)."""

    def __init__(self, ids: IdLog, *, stored: Progress | None = None) -> None:
        self.ids = ids
        self.pieces: list[ProgressEntry] = []
        #: Held while a step is read and stored: the heartbeat and a tool round may both store one.
        self.storing = asyncio.Lock()
        self._stored_pieces = len(stored.pieces) if stored else 0
        self._stored_ids = len(stored.ids) if stored else 0
        self._stored_rows = stored.rows if stored else 0

    def text_pieces(self) -> int:
        """How many of the pieces are text (a token each, but for split UTF-8)."""
        return sum(isinstance(piece, str) for piece in self.pieces)

    def unsaved(self) -> ProgressStep | None:
        """What is new since the last stored step; None when nothing is."""
        pieces, ids = self.pieces[self._stored_pieces :], self.ids.recorded[self._stored_ids :]
        if not pieces and not ids:
            return None
        return ProgressStep(position=self._stored_rows, pieces=pieces, ids=ids)

    def saved(self, step: ProgressStep | None) -> None:
        """`step` (from unsaved) is committed."""
        if step is not None:
            self._stored_pieces += len(step.pieces)
            self._stored_ids += len(step.ids)
            self._stored_rows += 1
