"""What a run of a job has produced, kept so that a takeover goes on from it: the text pieces and the ids given out,
how much of them is stored, and the assembler rebuilt from a stored progress (the same pieces with the same ids
rebuild the same events, sequence numbers included)."""

from __future__ import annotations

from app.events.assembler import ResponseAssembler
from app.generation.job import GenerationJob
from app.ids import new_id
from app.jobs.repository import Progress, ProgressStep
from app.schemas.responses import ResponseObject


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
        encrypted_reasoning=job.encrypted_reasoning,
        leading_items=job.leading_items,
        logprobs=job.sampling.top_logprobs is not None,
        parallel_tool_calls=job.parallel_tool_calls,
        ids=ids,
        announced=job.announced,
        mcp_tools=dict(job.mcp["tools"]) if job.mcp else None,
        prefill_only=job.sampling.prefill_only,
    )


def replay_progress(job: GenerationJob, progress: Progress) -> tuple[ResponseAssembler, ProgressLog]:
    """The assembler as the last run left it, and the log of what it had produced (all of it stored)."""
    log = ProgressLog(IdLog(progress.ids), stored=progress)
    assembler = job_assembler(job, log.ids)
    assembler.response.status = "in_progress"
    assembler.start()
    for piece in progress.pieces:
        assembler.text(piece)
        log.pieces.append(piece)
    return assembler, log


class ProgressLog:
    """A run's text pieces (given to the assembler, in order) and ids, and how many of each are stored, in how
    many progress rows: each store appends only what is new (a rewrite on every event would grow with the square
    of the length)."""

    def __init__(self, ids: IdLog, *, stored: Progress | None = None) -> None:
        self.ids = ids
        self.pieces: list[str] = []
        self._stored_pieces = len(stored.pieces) if stored else 0
        self._stored_ids = len(stored.ids) if stored else 0
        self._stored_rows = stored.rows if stored else 0

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
