"""What the model reads before a request's own input: the turns of its chain or the items of its
conversation, and the calls they answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.repositories import conversations as conversation_repository
from app.db.repositories import responses as repository
from app.errors import InvalidRequest, NotFound
from app.generation.prompt import Turn, call_ids
from app.schemas.items import CALL_OUTPUT_TYPES
from app.schemas.responses import TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class ConnectionChain:
    """A WebSocket connection's last response when it was not stored (store: false), kept in that connection's
    memory only: its whole context (earlier turns, then its own input and output) for a continuation to read."""

    response_id: str
    turns: Sequence[Turn]
    chain_root: str


async def load_history(session: AsyncSession, previous_id: str, tenant: str) -> tuple[list[Turn], str]:
    """The chain's turns, oldest first, and the id of its first response."""
    chain = await repository.get_chain(session, previous_id, tenant)
    if not chain:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if chain[-1].status not in TERMINAL_STATUSES:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' is still {chain[-1].status}; "
            "chain onto it once it has finished.",
            param="previous_response_id",
            code="previous_response_not_finished",
        )
    items = await repository.get_input_items(session, [row.id for row in chain])
    return [Turn(input_items=items[row.id], output_items=row.output) for row in chain], chain[0].id


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """A create on a conversation: which one, and the revision of it that the context was read from."""

    conversation_id: str
    revision: int


def conversation_not_found(conversation_id: str, param: str = "conversation_id") -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


async def load_conversation(
    session: AsyncSession, conversation_id: str, tenant: str
) -> tuple[list[Turn], ConversationTurn]:
    """The conversation's items as one earlier turn, and the revision they were read at."""
    row = await conversation_repository.get_conversation(session, conversation_id, tenant)
    if row is None:
        raise conversation_not_found(conversation_id, param="conversation")
    items = await conversation_repository.all_items(session, conversation_id)
    return [Turn(input_items=items, output_items=[])], ConversationTurn(conversation_id, row.revision)


def check_call_outputs(history: list[Turn], items: list[dict[str, Any]]) -> None:
    """Every function_call_output (or custom one) must answer a call somewhere in the context."""
    known = call_ids(history, items)
    for index, item in enumerate(items):
        if item["type"] in CALL_OUTPUT_TYPES and item["call_id"] not in known:
            raise InvalidRequest(
                f"No tool call found for {item['type']} with call_id {item['call_id']}.",
                param=f"input[{index}].call_id",
                code="invalid_value",
            )
