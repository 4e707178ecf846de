"""A response's final state: the columns it sets on its row, what the lifecycle's ended step is told beside them
(its conversation turn; a `store: false` response's end, which has no row); and, when our final write lost to
whoever ended it first, the terminal event they stored or that the row stands for."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from app.db.session import Database
from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES, terminal_event
from app.generation.job import GenerationJob
from app.generation.types import Finish, GenerationFailed
from app.jobs import repository
from app.lifecycle import transitions
from app.lifecycle.effects import Ending, TurnEnd, diagnose_cache
from app.schemas.responses import ResponseObject

logger = logging.getLogger(__name__)


def add_cache_diagnostics(job: GenerationJob, response: ResponseObject, output: Finish | GenerationFailed) -> None:
    """The response's prompt_cache_diagnostics (when its request named a comparison_response_id), from what the
    engine reused of its prompt: set before its final events are built, so that they carry them."""
    usage = (output.prompt_tokens, output.cached_tokens) if isinstance(output, Finish) else None
    response.prompt_cache_diagnostics = diagnose_cache(job.cache_comparison, usage)


def final_values(response: ResponseObject) -> dict[str, Any]:
    """The columns a terminal Response sets, in one conditional update with its status."""
    return {
        "status": response.status,
        "output": [item.model_dump(mode="json") for item in response.output],
        "usage": response.usage.model_dump(mode="json") if response.usage else None,
        "error": response.error.model_dump(mode="json") if response.error else None,
        "incomplete_details": response.incomplete_details.model_dump(mode="json")
        if response.incomplete_details
        else None,
        "completed_at": datetime.fromtimestamp(response.completed_at, UTC) if response.completed_at else None,
        "prompt_cache_diagnostics": response.prompt_cache_diagnostics,
    }


def turn_of(job: GenerationJob) -> TurnEnd | None:
    """The conversation turn the job's end finishes (None: it runs on no conversation)."""
    if job.conversation_id is None:
        return None
    return TurnEnd(job.conversation_id, list(job.conversation_input))


def unstored_ending(job: GenerationJob, final: ResponseObject, generation_s: float) -> Ending:
    """The end of a `store: false` response (it has no row to read it from)."""
    created_at = job.response.get("created_at")
    created = datetime.fromtimestamp(created_at, UTC) if isinstance(created_at, int | float) else datetime.now(UTC)
    return Ending(
        response_id=job.response_id,
        tenant=job.tenant,
        model=final.model,
        status=final.status,
        output=[item.model_dump(mode="json") for item in final.output],
        usage=final.usage.model_dump(mode="json") if final.usage else None,
        created_at=created,
        stored=False,
        background=bool(job.response.get("background")),
        job_class=job.job_class,
        turn=turn_of(job),
        generation_s=generation_s,
    )


async def row_verdict(database: Database, job: GenerationJob, sequence_number: int) -> dict[str, Any] | None:
    """The terminal event to publish when our final write lost: the one stored by whoever ended the response,
    or one built from its row; None while it is not ended (another worker holds it now)."""
    try:
        async with database.read() as session:
            row = await repository.reload(session, job.response_id)
            if row is None or row.status not in TERMINAL_STATUSES:
                return None
            if job.keep_events:
                stored = await repository.last_event(session, job.response_id)
                if stored is not None and stored["type"] in TERMINAL_EVENT_TYPES:
                    return stored
            return terminal_event(row, sequence_number)
    except Exception:
        logger.exception("could not read how %s ended", job.response_id)
        return None


async def record_unstored_end(
    database: Database, job: GenerationJob, final: ResponseObject, generation_s: float
) -> None:
    """The end of a `store: false` response on no conversation (one on a conversation ends in its turn's final
    write), in a unit of work of its own, before its end is sent. NOTE: a failure is logged and dropped: the
    response matters more than a count."""
    try:
        async with database.transaction() as session:
            await transitions.end_unstored(session, unstored_ending(job, final, generation_s))
    except Exception as error:
        logger.warning("could not record the end of %s: %s", job.response_id, error)
