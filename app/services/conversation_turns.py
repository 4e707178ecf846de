"""A response on a conversation: it claims the conversation when it is submitted, and when it finishes its
input and output items are appended (in the commit of its final state) and the claim released.

NOTE: as on the hosted API, one response runs on a conversation at a time: a second create while one is
running is a 400 `conversation_locked` ("retry in a few seconds"). A response that fails or is cancelled adds
nothing, so the conversation stays as it was and the turn can be retried.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.repositories import conversations as repository
from app.errors import InvalidRequest
from app.queue.base import GenerationJob
from app.services.context import ConversationTurn, conversation_not_found

#: A claim of a response that has no row (store: false) ends after this even if the response never
#: finished (its worker died): the conversation cannot stay locked forever.
UNSTORED_CLAIM_LEASE_S = 600
#: The statuses whose items are appended to the conversation.
APPENDED_STATUSES = frozenset({"completed", "incomplete"})


def conversation_locked() -> InvalidRequest:
    return InvalidRequest(
        "Another process is currently operating on this conversation. Please retry in a few seconds.",
        param="conversation",
        code="conversation_locked",
    )


async def claim(session: AsyncSession, turn: ConversationTurn, response_id: str, tenant: str) -> None:
    """400 conversation_locked when another response is running on it, or it changed since it was read."""
    claimed = await repository.claim(
        session,
        turn.conversation_id,
        tenant,
        response_id=response_id,
        seen_revision=turn.revision,
        lease_expired_before=utc_now() - timedelta(seconds=UNSTORED_CLAIM_LEASE_S),
    )
    if claimed:
        return
    if await repository.get_conversation(session, turn.conversation_id, tenant) is None:
        raise conversation_not_found(turn.conversation_id, param="conversation")
    raise conversation_locked()


async def release(session: AsyncSession, turn: ConversationTurn, response_id: str) -> None:
    await repository.release(session, turn.conversation_id, response_id)


async def finish(session: AsyncSession, job: GenerationJob, status: str, output: list[dict[str, Any]]) -> None:
    """In the final state's transaction: append the turn (if it completed) and end the claim."""
    if job.conversation_id is None:
        return
    if status in APPENDED_STATUSES:
        await repository.append_items(session, job.conversation_id, [*job.conversation_input, *output])
    await repository.release(session, job.conversation_id, job.response_id)
