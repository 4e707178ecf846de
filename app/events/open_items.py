"""The output items a relayed stream opened and has not closed, with their text so far: a terminal event that does
not follow their `done` events (the relay made it from the stored row, or the run that sent it lost the final
write) gets them first, so that a reader (the SDK's stream accumulator) sees every item end."""

from __future__ import annotations

import itertools
from typing import Any

from app.events.item_events import item_done_events
from app.schemas.events import OutputTextDeltaEvent, ReasoningTextDeltaEvent, ResponseEvent
from app.schemas.items import STORED_ITEM, OutputText, ReasoningText


class OpenItems:
    def __init__(self, *, complete: bool = True) -> None:
        #: False for a replay resumed after some event: what was opened before it was not seen here.
        self.complete = complete
        self._items: dict[str, dict[str, Any]] = {}  # item id -> the output_item.added event
        self._parts: dict[str, dict[str, Any]] = {}  # item id -> its content_part.added event
        #: Each open item's deltas, joined only when it is closed here (a string grown by every delta would be
        #: copied whole each time: quadratic in a long answer, on every token).
        self._text: dict[str, list[str]] = {}
        self._done: dict[str, tuple[int, dict[str, Any]]] = {}  # item id -> (output index, item as done)

    def see(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "response.output_item.added":
            self._items[event["item"]["id"]] = event
        elif kind == "response.output_item.done":
            self._done[event["item"]["id"]] = (event["output_index"], event["item"])
            for known in (self._items, self._parts, self._text):
                known.pop(event["item"]["id"], None)
        elif kind == "response.content_part.added":
            self._parts[event["item_id"]] = event
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            self._text.setdefault(event["item_id"], []).append(event["delta"])

    def _seen(self, item_id: str) -> str:
        return "".join(self._text.get(item_id, ()))

    def _closed(self, final_output: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
        """(output index, item as it ends) of each open item: as `final_output` has it (the response's own
        output, by id), else with its text so far, `incomplete`."""
        final = {item.get("id"): item for item in final_output}
        closed = []
        for item_id, added in sorted(self._items.items(), key=lambda entry: entry[1]["output_index"]):
            if item_id in final:
                item = final[item_id]
            else:
                text = self._seen(item_id)
                part = (
                    ReasoningText(text=text).model_dump()
                    if added["item"]["type"] == "reasoning"
                    else OutputText(type="output_text", text=text).model_dump()
                )
                item = {**added["item"], "content": [part], "status": "incomplete"}
            closed.append((added["output_index"], STORED_ITEM.validate_python(item).model_dump(mode="json")))
        return closed

    def output_so_far(self) -> list[dict[str, Any]]:
        """Every item the stream saw, the open ones closed `incomplete`, in output order."""
        return [item for _, item in sorted([*self._done.values(), *self._closed([])], key=lambda entry: entry[0])]

    def close(self, sequence_number: int, final_output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The `done` events of every open item, numbered from `sequence_number`."""
        numbers = itertools.count(sequence_number)
        events: list[ResponseEvent] = []
        for index, item in self._closed(final_output):
            item_id = item["id"]
            text = item["content"][0].get("text", "") if item.get("content") else ""
            seen = self._seen(item_id)
            rest = text[len(seen) :] if text.startswith(seen) else ""
            reasoning = item["type"] == "reasoning"
            if rest and (reasoning or item_id in self._parts):  # the final text said more than the deltas it saw
                delta = ReasoningTextDeltaEvent if reasoning else OutputTextDeltaEvent
                events.append(
                    delta(
                        sequence_number=next(numbers), item_id=item_id, output_index=index, content_index=0, delta=rest
                    )
                )
            events += item_done_events(
                STORED_ITEM.validate_python(item),
                index,
                lambda: next(numbers),
                part_opened=item_id in self._parts,
            )
        return [event.model_dump(mode="json") for event in events]
