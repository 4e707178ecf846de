"""One round of the model's output as items: the parser's segments (app/generation/dialects) opened, grown and
closed as reasoning items, messages and streamed calls, each with its stream events, in the order the model wrote
them. Calls that are not streamed (an MCP tool's, a client tool type's, every call of a response that may call
MCP tools) are kept as parsed calls for the assembler to make items of at the end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.events.item_events import item_done_events
from app.events.logprobs import TokenLogprobs
from app.generation.dialects.segments import (
    CallDelta,
    CallEnd,
    CallStart,
    Phase,
    ReasoningDelta,
    ReasoningEnd,
    Segment,
    TextDelta,
    TextEnd,
)
from app.generation.prompt import encode_reasoning
from app.generation.tool_calls import ParsedCall
from app.schemas.events import (
    ContentPartEvent,
    CustomToolCallInputDeltaEvent,
    CustomToolCallInputDoneEvent,
    EventLogprob,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemEvent,
    OutputTextDeltaEvent,
    ReasoningTextDeltaEvent,
    ResponseEvent,
)
from app.schemas.items import (
    Item,
    MessageItem,
    OutputText,
    ReasoningText,
    StoredCustomToolCall,
    StoredFunctionCall,
    StoredReasoning,
)


@dataclass(slots=True)
class _Buffered:
    """A call kept whole for the end (not streamed): its name and its arguments so far."""

    name: str
    parts: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CallRouting:
    """Which calls stream as they come: a function's or a custom tool's, when the response makes no MCP calls
    (their items come after an MCP round's, at the end); `namespaces` maps every offered name to its namespace."""

    namespaces: dict[str, str | None]
    custom_tools: set[str]
    tool_types: set[str]
    mcp_tools: dict[str, str]
    parallel: bool


class RoundItems:
    """The items of one round, from output index `first` on; every method returns the events it made, in order."""

    def __init__(
        self,
        first: int,
        routing: CallRouting,
        number: Callable[[], int],
        ids: Callable[[str], str],
        logprobs: TokenLogprobs | None,
        encrypted_reasoning: bool,
    ) -> None:
        self._first = first
        self._routing = routing
        self._next = number
        self._ids = ids
        self._logprobs = logprobs
        self._encrypted = encrypted_reasoning
        self.items: list[Item] = []
        #: The open item: a reasoning item, a message or a streamed call.
        self.open: Item | None = None
        #: The open item's text so far, and whether it is a message (kept apart: checked on every token).
        self._text = ""
        self._saying = False
        self._spans: list[list[int]] = []
        self._phase: Phase | None = None
        self._buffered: _Buffered | None = None
        self._skipping = False
        #: Calls kept whole for the end (see the module's doc), in order.
        self.parsed: list[ParsedCall] = []
        self.calls_seen = 0
        #: The citations of a message's text, given the searches before it (the assembler's; None: no search).
        self.annotate: Callable[[str], list[dict[str, Any]]] | None = None

    @property
    def _index(self) -> int:
        return self._first + len(self.items)

    def has_message(self) -> bool:
        return any(isinstance(item, MessageItem) for item in (*self.items, self.open))

    def has_calls(self) -> bool:
        return any(isinstance(item, StoredFunctionCall | StoredCustomToolCall) for item in self.items)

    def reasoning_open(self) -> bool:
        return isinstance(self.open, StoredReasoning)

    def take(self, segments: list[Segment]) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        for segment in segments:
            if isinstance(segment, TextDelta):
                events += self.say(segment.text, segment.start, segment.phase)
            elif isinstance(segment, ReasoningDelta):
                events += self._reason(segment.text)
            elif isinstance(segment, CallStart):
                events += self._call_start(segment.name)
            elif isinstance(segment, CallDelta):
                events += self._call_delta(segment.text)
            elif isinstance(segment, CallEnd):
                events += self._call_end(segment)
            elif (isinstance(segment, ReasoningEnd) and isinstance(self.open, StoredReasoning)) or (
                isinstance(segment, TextEnd) and isinstance(self.open, MessageItem)
            ):
                events += self.close("completed")
        return events

    def _added(self, item: Item) -> list[ResponseEvent]:
        self.open = item
        added = item.model_copy(deep=True)
        return [
            OutputItemEvent(
                type="response.output_item.added", sequence_number=self._next(), output_index=self._index, item=added
            )
        ]

    # Reasoning --------------------------------------------------------------------------------------------------

    def _reason(self, text: str) -> list[ResponseEvent]:
        events: list[ResponseEvent] = []
        if not isinstance(self.open, StoredReasoning):
            events += self.close("completed")
            events += self._added(StoredReasoning(id=self._ids("rs"), content=[], status="in_progress"))
            self._text = ""
        assert self.open is not None
        self._text += text
        events.append(
            ReasoningTextDeltaEvent(
                sequence_number=self._next(),
                item_id=self.open.id,
                output_index=self._index,
                content_index=0,
                delta=text,
            )
        )
        return events

    # Messages ---------------------------------------------------------------------------------------------------

    def say(self, text: str, start: int, phase: Phase | None = None) -> list[ResponseEvent]:
        """Answer text, at `start` in the model's whole text: a message opened for it (of `phase`) when none is."""
        events: list[ResponseEvent] = []
        if not self._saying or phase != self._phase:
            stripped = text.lstrip()  # a message starts at its first non-space character
            if not stripped:
                return []
            start += len(text) - len(stripped)
            text = stripped
            events += self.close("completed")
            message = MessageItem(id=self._ids("msg"), role="assistant", content=[], status="in_progress")
            if phase is not None:
                message.phase = phase
            events += self._added(message)
            events.append(self._part_event("response.content_part.added", OutputText(type="output_text", text="")))
            self._text, self._spans, self._phase, self._saying = "", [], phase, True
        assert self.open is not None
        self._text += text
        if self._spans and self._spans[-1][1] == start:
            self._spans[-1][1] = start + len(text)
        else:
            self._spans.append([start, start + len(text)])
        events.append(
            OutputTextDeltaEvent(
                sequence_number=self._next(),
                item_id=self.open.id,
                output_index=self._index,
                content_index=0,
                delta=text,
                logprobs=self._logprobs.for_event(text, start) if self._logprobs else [],
            )
        )
        return events

    def _part_event(self, kind: str, part: OutputText) -> ContentPartEvent:
        assert self.open is not None
        return ContentPartEvent(
            type=kind,
            sequence_number=self._next(),
            item_id=self.open.id,
            output_index=self._index,
            content_index=0,
            part=part,
        )

    def _message_logprobs(self, text: str) -> tuple[OutputText, list[EventLogprob]]:
        if self._logprobs is None:
            return OutputText(type="output_text", text=text, logprobs=[]), []
        part, events = [], []
        offset = 0
        for start, end in self._spans:
            span = text[offset : offset + end - start]
            offset += end - start
            part += self._logprobs.for_part(span, start)
            events += self._logprobs.for_event(span, start)
        return OutputText(type="output_text", text=text, logprobs=part), events

    # Calls ------------------------------------------------------------------------------------------------------

    def _streams(self, name: str) -> bool:
        routing = self._routing
        return not routing.mcp_tools and name not in routing.tool_types

    def _call_start(self, name: str) -> list[ResponseEvent]:
        events = self.close("completed")
        self.calls_seen += 1
        self._skipping = not self._routing.parallel and self.calls_seen > 1
        if self._skipping:  # parallel_tool_calls: false keeps the first call only
            return events
        if not self._streams(name):
            self._buffered = _Buffered(name)
            return events
        namespace = self._routing.namespaces.get(name)
        call: Item
        if name in self._routing.custom_tools:
            call = StoredCustomToolCall(id=self._ids("ctc"), call_id=self._ids("call"), name=name, input="")
            call.namespace = namespace
        else:
            call = StoredFunctionCall(
                id=self._ids("fc"),
                call_id=self._ids("call"),
                name=name,
                arguments="",
                namespace=namespace,
                status="in_progress",
            )
        self._text = ""
        return events + self._added(call)

    def _call_delta(self, text: str) -> list[ResponseEvent]:
        if self._skipping:
            return []
        if self._buffered is not None:
            self._buffered.parts.append(text)
            return []
        self._text += text
        call = self.open
        if isinstance(call, StoredCustomToolCall):
            return [
                CustomToolCallInputDeltaEvent(
                    sequence_number=self._next(), item_id=call.id, output_index=self._index, delta=text
                )
            ]
        assert isinstance(call, StoredFunctionCall)
        return [
            FunctionCallArgumentsDeltaEvent(
                sequence_number=self._next(), item_id=call.id, output_index=self._index, delta=text
            )
        ]

    def _call_end(self, end: CallEnd) -> list[ResponseEvent]:
        if self._skipping:
            self._skipping = False
            return []
        if self._buffered is not None:
            self.parsed.append(ParsedCall(self._buffered.name, end.arguments, end.complete, end.markup, end.markup_at))
            self._buffered = None
            return []
        if not isinstance(self.open, StoredFunctionCall | StoredCustomToolCall):
            return []
        return self._close_call("completed" if end.complete else "incomplete")

    def _close_call(self, status: str) -> list[ResponseEvent]:
        call = self.open
        text = self._text
        events: list[ResponseEvent] = []
        if isinstance(call, StoredCustomToolCall):
            call = call.model_copy(update={"input": text})
            events.append(
                CustomToolCallInputDoneEvent(
                    sequence_number=self._next(), item_id=call.id, output_index=self._index, input=text
                )
            )
        else:
            assert isinstance(call, StoredFunctionCall)
            call = call.model_copy(update={"arguments": text, "status": status})
            events.append(
                FunctionCallArgumentsDoneEvent(
                    sequence_number=self._next(), item_id=call.id, output_index=self._index, arguments=text
                )
            )
        events.append(
            OutputItemEvent(
                type="response.output_item.done", sequence_number=self._next(), output_index=self._index, item=call
            )
        )
        self.items.append(call)
        self.open, self._saying = None, False
        return events

    # Closing ----------------------------------------------------------------------------------------------------

    def close(self, status: str) -> list[ResponseEvent]:
        """The open item ends (`status`: completed, or incomplete for one a cut or a failure ended)."""
        item = self.open
        if item is None:
            return []
        if isinstance(item, StoredFunctionCall | StoredCustomToolCall):
            return self._close_call(status)
        text = self._text
        logprobs: list[EventLogprob] = []
        if isinstance(item, StoredReasoning):
            encrypted = encode_reasoning(text) if self._encrypted else None
            item = item.model_copy(
                update={"content": [ReasoningText(text=text)], "status": status, "encrypted_content": encrypted}
            )
        else:
            assert isinstance(item, MessageItem)
            part, logprobs = self._message_logprobs(text)
            if self.annotate is not None:
                part.annotations = self.annotate(text)
            item = item.model_copy(update={"content": [part], "status": status})
        self.items.append(item)
        self.open, self._saying = None, False
        return item_done_events(item, self._index - 1, self._next, logprobs=logprobs)

    def empty_message(self) -> list[ResponseEvent]:
        """An answer with nothing in it: an empty message, opened and closed."""
        message = MessageItem(id=self._ids("msg"), role="assistant", content=[], status="in_progress")
        self._text, self._spans, self._phase, self._saying = "", [], None, True
        events = self._added(message)
        events.append(self._part_event("response.content_part.added", OutputText(type="output_text", text="")))
        return events
