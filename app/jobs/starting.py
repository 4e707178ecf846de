"""How a run starts its generation: a fresh job's prefill begun while its claim commits (HeadStart), and a
takeover's job continued from the progress the last run stored (continued_job, counted)."""

from __future__ import annotations

from dataclasses import replace

import anyio

from app.generation.job import GenerationJob
from app.generation.runner import GenerationRun, ModelRunner
from app.generation.types import Finish
from app.jobs.progress import Replay
from app.jobs.tool_loop import ToolLoop


class HeadStart:
    """A fresh job's generation, started before its claim so that the prefill runs while the claim's transaction
    commits (the first token waits for the longer of the two, not for both). Nothing of it is read until the
    claim says this run is the job's first: then the run adopts it; otherwise (not ours, or a takeover, whose
    job continues the stored progress) it is cancelled and drained unread, so that nothing it made is sent or
    stored. A cancel signal that comes while the claim commits stops it (the runner knows it by then)."""

    def __init__(self, run: GenerationRun | None) -> None:
        self._run = run

    @classmethod
    def of(cls, runner: ModelRunner, job: GenerationJob, *, allowed: bool) -> HeadStart:
        return cls(runner.start(job) if allowed else None)

    def adopt(self) -> GenerationRun | None:
        """The generation begun early, now the run's own (None when none was begun)."""
        run, self._run = self._run, None
        return run

    async def discard(self) -> None:
        """Stop the generation begun early, if nobody adopted it, and wait for its end (its sequence is free)."""
        run, self._run = self._run, None
        if run is None:
            return
        run.cancel()
        with anyio.CancelScope(shield=True):
            async for _ in run.outputs():
                pass


async def continued_job(
    job: GenerationJob, replay: Replay, runner: ModelRunner, tools: ToolLoop | None
) -> tuple[GenerationJob, tuple[int, int]]:
    """A takeover's job: the round after the recorded ones, its prompt continued by what earlier runs wrote of it;
    and (the round's own prompt length, the tokens written), which its first Finish counts as output (counted)."""
    if tools is not None:  # the round after the recorded ones; a recorded call is never made again
        await tools.replay(runner, replay.rounds)
        job = tools.job
    written = await runner.tokenize(job.model, replay.text) if replay.text else []
    cap = job.sampling.max_output_tokens
    sampling = replace(
        job.sampling,
        max_output_tokens=None if cap is None else max(cap - len(written), 0),
        resumed_output_tokens=len(written),
    )
    continued = replace(job, prompt_tokens=[*job.prompt_tokens, *written], sampling=sampling)
    return continued, (len(job.prompt_tokens), len(written))


def counted(finish: Finish, carried: tuple[int, int]) -> Finish:
    """A takeover's first Finish: what earlier runs wrote of its round continued the prompt; it is output."""
    prompt, written = carried
    return Finish(finish.reason, prompt, min(finish.cached_tokens, prompt), written + finish.output_tokens)
