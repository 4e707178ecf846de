"""The events that end an output item, built in one place for everyone who ends one: the assembler as the model
finishes it, and a relay closing an item that a stream left open (open_items.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.schemas.events import (
    AnnotationAddedEvent,
    ContentPartEvent,
    EventLogprob,
    OutputItemEvent,
    OutputTextDoneEvent,
    ReasoningTextDoneEvent,
    ResponseEvent,
)
from app.schemas.items import Item, MessageItem, OutputText, StoredReasoning


def item_done_events(
    item: Item,
    output_index: int,
    number: Callable[[], int],
    *,
    part_opened: bool = True,
    logprobs: Sequence[EventLogprob] = (),
) -> list[ResponseEvent]:
    """A reasoning item's text `done`, or a message's citations (annotation.added), text and content part `done`
    (when its part was opened), then `response.output_item.done`; `number()` gives each event its sequence
    number, in order."""
    events: list[ResponseEvent] = []
    if isinstance(item, StoredReasoning):
        text = item.content[0].text if item.content else ""
        events.append(
            ReasoningTextDoneEvent(
                sequence_number=number(), item_id=item.id, output_index=output_index, content_index=0, text=text
            )
        )
    elif isinstance(item, MessageItem) and part_opened:
        part = item.content[0]
        assert isinstance(part, OutputText), "an output message's part is its output_text"
        events += [
            AnnotationAddedEvent(
                sequence_number=number(),
                item_id=item.id,
                output_index=output_index,
                content_index=0,
                annotation_index=position,
                annotation=dict(annotation),
            )
            for position, annotation in enumerate(part.annotations)
        ]
        events.append(
            OutputTextDoneEvent(
                sequence_number=number(),
                item_id=item.id,
                output_index=output_index,
                content_index=0,
                text=part.text,
                logprobs=list(logprobs),
            )
        )
        events.append(
            ContentPartEvent(
                type="response.content_part.done",
                sequence_number=number(),
                item_id=item.id,
                output_index=output_index,
                content_index=0,
                part=part,
            )
        )
    events.append(
        OutputItemEvent(
            type="response.output_item.done", sequence_number=number(), output_index=output_index, item=item
        )
    )
    return events
