"""Compaction items: a summary sealed into `encrypted_content`, and opened again into what the model reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from app.errors import InvalidRequest
from app.generation.prompt import COMPACTION_SUMMARY, Turn
from app.ids import new_id
from app.secrets.sealer import ContentSealer, SealBroken

PURPOSE = "compaction"
PAYLOAD_VERSION = 1


def compaction_item(sealer: ContentSealer, tenant: str, summary: str, *, model: str) -> dict[str, Any]:
    """A stored compaction item carrying `summary`, readable only by this deployment and for this tenant."""
    payload = {"v": PAYLOAD_VERSION, "summary": summary, "model": model, "created_at": int(time.time())}
    return {
        "type": "compaction",
        "id": new_id("cmp"),
        "encrypted_content": sealer.seal(payload, purpose=PURPOSE, tenant=tenant),
    }


def open_summary(sealer: ContentSealer, tenant: str, item: dict[str, Any]) -> str:
    """The summary a compaction item carries; SealBroken when it was forged, altered or is not ours."""
    payload = sealer.open(str(item.get("encrypted_content", "")), purpose=PURPOSE, tenant=tenant)
    summary = payload.get("summary")
    if payload.get("v") != PAYLOAD_VERSION or not isinstance(summary, str):
        raise SealBroken("not a compaction payload")
    return summary


def broken_compaction(param: str) -> InvalidRequest:
    # Never the content itself: what a client sent back is echoed nowhere.
    return InvalidRequest(
        "The compaction item's encrypted_content could not be verified: it was not produced by this server for "
        "this API key, was altered, or was sealed with a key this server no longer has.",
        param=param,
        code="invalid_encrypted_content",
    )


def open_compactions(
    sealer: ContentSealer, tenant: str, items: Sequence[dict[str, Any]], param_of: Callable[[int], str]
) -> list[dict[str, Any]]:
    """The items as the model reads them: each compaction item becomes its summary (see generation.prompt).

    A compaction item that does not open is a 400 naming `param_of(its index)`.
    """
    opened: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if item.get("type") != "compaction":
            opened.append(item)
            continue
        try:
            summary = open_summary(sealer, tenant, item)
        except SealBroken:
            raise broken_compaction(param_of(index)) from None
        opened.append({"type": COMPACTION_SUMMARY, "id": item.get("id"), "summary": summary})
    return opened


def open_history(sealer: ContentSealer, tenant: str, history: Sequence[Turn], param: str) -> list[Turn]:
    """Earlier turns as the model reads them; a compaction item there that does not open is a 400 naming
    `param` (previous_response_id or conversation)."""
    return [
        Turn(
            input_items=open_compactions(sealer, tenant, turn.input_items, lambda _: param),
            output_items=open_compactions(sealer, tenant, turn.output_items, lambda _: param),
        )
        for turn in history
    ]


def check_compactions(sealer: ContentSealer, tenant: str, items: Sequence[dict[str, Any]], param: str) -> None:
    """400 for any compaction item among `items` (a request's own, at `param[i]`) that does not open."""
    open_compactions(sealer, tenant, items, lambda index: f"{param}[{index}].encrypted_content")
