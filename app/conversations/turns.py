"""A response on a conversation: its context is the conversation's items as read at one revision; it claims the
conversation when it is submitted, and when it finishes its input and output items are appended (in the commit
of its final state) and the claim released.

NOTE: as on the hosted API, one response runs on a conversation at a time: a second create while one is
running is a 400 `conversation_locked` ("retry in a few seconds"). A response that fails or is cancelled adds
nothing, so the conversation stays as it was and the turn can be retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.conversations import repository
from app.errors import InvalidRequest, NotFound
from app.generation.prompt import Turn

#: A claim of a response that has no row (store: false) ends after this even if the response never
#: finished (its worker died): the conversation cannot stay locked forever.
UNSTORED_CLAIM_LEASE_S = 600
#: The statuses whose items are appended to the conversation.
APPENDED_STATUSES = frozenset({"completed", "incomplete"})


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """A create on a conversation: which one, and the revision of it that the context was read from."""

    conversation_id: str
    revision: int


def conversation_not_found(conversation_id: str, param: str = "conversation_id") -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


def conversation_locked() -> InvalidRequest:
    return InvalidRequest(
        "Another process is currently operating on this conversation. Please retry in a few seconds.",
        param="conversation",
        code="conversation_locked",
    )


async def load_conversation(
    session: AsyncSession, conversation_id: str, tenant: str
) -> tuple[list[Turn], ConversationTurn]:
    """The conversation's items as one earlier turn, and the revision they were read at."""
    row = await repository.get_conversation(session, conversation_id, tenant)
    if row is None:
        raise conversation_not_found(conversation_id, param="conversation")
    items = await repository.all_items(session, conversation_id)
    return [Turn(input_items=items, output_items=[])], ConversationTurn(conversation_id, row.revision)


async def claim(session: AsyncSession, turn: ConversationTurn, response_id: str, tenant: str) -> None:
    """400 conversation_locked when another response is running on it, or it changed since it was read."""
    claimed = await repository.claim(
        session,
        turn.conversation_id,
        tenant,
        response_id=response_id,
        seen_revision=turn.revision,
        unstored_lease_s=UNSTORED_CLAIM_LEASE_S,
    )
    if claimed:
        return
    if await repository.get_conversation(session, turn.conversation_id, tenant) is None:
        raise conversation_not_found(turn.conversation_id, param="conversation")
    raise conversation_locked()


async def release(session: AsyncSession, turn: ConversationTurn, response_id: str) -> None:
    await repository.release(session, turn.conversation_id, response_id)


async def finish(
    session: AsyncSession, conversation_id: str, response_id: str, status: str, items: list[dict[str, Any]]
) -> None:
    """In the final state's transaction: append the turn's `items` (its input, then its output) if it completed,
    and end the claim."""
    if status in APPENDED_STATUSES:
        await repository.append_items(session, conversation_id, items)
    await repository.release(session, conversation_id, response_id)
