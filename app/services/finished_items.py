"""What the final state of a response adds beside its row, in the same transaction: its output items
indexed by id (for item_reference), and its turn on its conversation."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.repositories import items as repository
from app.queue.base import GenerationJob
from app.schemas.responses import ResponseObject
from app.services import conversation_turns


async def record_final_items(session: AsyncSession, job: GenerationJob, final: ResponseObject) -> None:
    output = [item.model_dump(mode="json") for item in final.output]
    if job.store:
        await repository.index_output_items(session, job.response_id, output)
    await conversation_turns.finish(session, job, final.status, output)
