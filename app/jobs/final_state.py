"""A response's final state: the columns it sets on its row; what it adds beside the row in the same transaction
(its output items indexed by id, for item_reference, and its turn on its conversation); and, when our final write
lost to whoever ended it first, the terminal event they stored or that the row stands for."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.conversations import turns
from app.db.session import Database
from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES, terminal_event
from app.generation.job import GenerationJob
from app.generation.types import Finish, GenerationFailed
from app.items import repository as items
from app.jobs import repository
from app.prompt_cache.diagnosis import job_diagnostics
from app.schemas.responses import ResponseObject
from app.usage import repository as usage

logger = logging.getLogger(__name__)


def add_cache_diagnostics(job: GenerationJob, response: ResponseObject, output: Finish | GenerationFailed) -> None:
    """The response's prompt_cache_diagnostics (when its request named a comparison_response_id), from what the
    engine reused of its prompt: set before its final events are built, so that they carry them."""
    usage = (output.prompt_tokens, output.cached_tokens) if isinstance(output, Finish) else None
    response.prompt_cache_diagnostics = job_diagnostics(job.cache_comparison, usage)


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


async def record_final_items(session: AsyncSession, job: GenerationJob, final: ResponseObject) -> None:
    output = [item.model_dump(mode="json") for item in final.output]
    if job.store:
        await items.index_output_items(session, job.response_id, output)
    if job.conversation_id is not None:
        await turns.finish(
            session, job.conversation_id, job.response_id, final.status, [*job.conversation_input, *output]
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


async def record_unstored_usage(
    database: Database, job: GenerationJob, final: ResponseObject, generation_s: float
) -> None:
    """A `store: false` response's usage (it has no row whose final write could add it), in a unit of work of its
    own, before its end is sent. NOTE: a failure is logged and dropped: the response matters more than a count."""
    created_at = job.response.get("created_at")
    created = datetime.fromtimestamp(created_at, UTC) if isinstance(created_at, int | float) else datetime.now(UTC)
    entry = usage.entry_of(
        tenant=job.tenant,
        model=final.model,
        day=created.date(),
        usage=final.usage.model_dump(mode="json") if final.usage else None,
        generation_s=generation_s,
    )
    try:
        async with database.transaction() as session:
            await usage.add(session, entry)
    except Exception as error:
        logger.warning("could not count the usage of %s: %s", job.response_id, error)
