"""What a context's items decide beside the prompt itself: the configuration its `configuration_update` items set,
and the reasoning items the model will not read (the Response's `input_transformations`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.generation.prompt import Turn, apply_compaction
from app.schemas.responses import InputTransformation


def context_items(history: Sequence[Turn], items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every item of the context, oldest first: each earlier turn's input then its output, then `items`."""
    return [item for turn in history for item in (*turn.input_items, *turn.output_items)] + list(items)


def configured_effort(history: Sequence[Turn], items: Sequence[dict[str, Any]]) -> str | None:
    """The reasoning effort the newest configuration_update of the context that says one sets; None where none
    does, or the newest sets it back to the default (`effort: null`). Compaction does not end it: an update stays
    in effect until another replaces it."""
    effort: str | None = None
    for item in context_items(history, items):
        if item.get("type") == "configuration_update" and item.get("reasoning") is not None:
            effort = item["reasoning"].get("effort")
    return effort


def withheld_reasoning(
    history: Sequence[Turn], items: Sequence[dict[str, Any]], reasoning_tags: tuple[str, str] | None
) -> list[InputTransformation]:
    """The reasoning items of the context (as the model reads it: compaction items opened) that the model will not
    read, in input order.

    A model with no reasoning markers has no way to read reasoning (generation/prompt.py leaves it out): every
    reasoning item that reaches the prompt is withheld, `model_mismatch`. Those a compaction summary stands for
    are not listed: the summary replaced them, as it replaced the rest.
    """
    if reasoning_tags is not None:
        return []
    return [
        InputTransformation(id=str(item.get("id")), reason="model_mismatch")
        for item in apply_compaction(context_items(history, items))
        if item.get("type") == "reasoning"
    ]
