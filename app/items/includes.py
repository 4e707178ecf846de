"""`include` on reads (GET a response, list input items): what can be added to stored items after the fact."""

from __future__ import annotations

from typing import get_args

from app.errors import InvalidRequest
from app.generation.prompt import encode_reasoning
from app.schemas.items import ENCRYPTED_REASONING_INCLUDE, Includable, Item, StoredReasoning

INCLUDABLE: frozenset[str] = frozenset(get_args(Includable))


def parse_includes(values: list[str]) -> frozenset[str]:
    """The include values of a read, or a 400 naming one the API does not define.

    Values for images are accepted and add nothing: no such items exist here. Logprobs, and the hosted tools'
    results and sources, exist only when the create asked for them; a read cannot compute them afterwards, and
    says nothing it does not know.
    """
    for value in values:
        if value not in INCLUDABLE:
            raise InvalidRequest(
                f"Invalid value for 'include': '{value}'. Supported values are: {', '.join(sorted(INCLUDABLE))}.",
                param="include",
                code="invalid_value",
            )
    return frozenset(values)


def with_includes(items: list[Item], includes: frozenset[str]) -> list[Item]:
    """Items with what `includes` asks for added: the reasoning's encrypted_content (from its stored text)."""
    if ENCRYPTED_REASONING_INCLUDE not in includes:
        return items
    return [
        item.model_copy(update={"encrypted_content": encode_reasoning("".join(part.text for part in item.content))})
        if isinstance(item, StoredReasoning) and item.encrypted_content is None and item.content
        else item
        for item in items
    ]
