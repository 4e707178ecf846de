"""A takeover's job: continued from the progress the last run stored, and its first Finish counted so."""

from __future__ import annotations

from dataclasses import replace

from app.generation.job import GenerationJob
from app.generation.runner import ModelRunner
from app.generation.types import Finish
from app.jobs.progress import Replay
from app.jobs.tool_loop import ToolLoop


async def continued_job(
    job: GenerationJob, replay: Replay, runner: ModelRunner, tools: ToolLoop | None
) -> tuple[GenerationJob, tuple[int, int]]:
    """A takeover's job: the round after the recorded ones, its prompt continued by what earlier runs wrote of it;
    and (the round's own prompt length, the tokens written), which its first Finish counts as output (counted)."""
    if tools is not None:  # the round after the recorded ones; a recorded call is never made again
        await tools.replay(runner, replay.rounds, replay.assembler)
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
