"""Generation output -> the Response it builds and the stream events on the way (one path for JSON and SSE).

The model's text is read in up to three parts, in order: a reasoning section (between the model's reasoning
tags, when it has them), the answer (a message), and function calls (from the first call tag on, when
functions are offered). Text that may be the start of a tag is held back until it is clear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.events.call_items import ClientCall, call_events, call_items
from app.events.item_events import item_done_events
from app.events.logprobs import TokenLogprobs
from app.events.mcp_items import call_closing_events, close_open_calls, list_tools_events, open_tool_calls
from app.generation.prompt import encode_reasoning
from app.generation.tool_calls import CALL_OPEN, ParsedCall, held_back, parse_calls, parse_cut_calls
from app.generation.types import Finish, ScoredPiece
from app.ids import new_id
from app.schemas.events import (
    CompactionCompactingEvent,
    ContentPartEvent,
    ErrorEvent,
    OutputItemEvent,
    OutputTextDeltaEvent,
    ReasoningTextDeltaEvent,
    ResponseEvent,
    ResponseLifecycleEvent,
)
from app.schemas.items import (
    STORED_ITEM,
    Item,
    MessageItem,
    OutputText,
    ReasoningText,
    StoredCompaction,
    StoredMcpCall,
    StoredMcpListTools,
    StoredReasoning,
)
from app.schemas.responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    ResponseError,
    ResponseObject,
    Usage,
)

FINAL_STATUS = {"stop": "completed", "length": "incomplete", "cancelled": "cancelled", "steered": "incomplete"}
#: What the API sends of a background stream before any worker takes its job.
OPENING_EVENT_TYPES = ("response.created", "response.queued")


def opening_events(response: ResponseObject) -> list[ResponseLifecycleEvent]:
    """`response.created` and `response.queued` of a queued response, sequence numbers 0 and 1."""
    return [
        ResponseLifecycleEvent(type=kind, sequence_number=number, response=response.model_copy(deep=True))
        for number, kind in enumerate(OPENING_EVENT_TYPES)
    ]


class ResponseAssembler:
    """Grows one Response from text pieces; every method returns the events that step produced, in order.

    `functions` maps each offered function name to its namespace (None outside a namespace);
    `reasoning_tags` are the model's (open, close) reasoning markers, if it has any. With `logprobs`, the
    pieces are ScoredPieces and the answer's part and deltas carry their tokens' logprobs.
    """

    def __init__(
        self,
        response: ResponseObject,
        functions: dict[str, str | None] | None = None,
        reasoning_tags: tuple[str, str] | None = None,
        *,
        custom_tools: set[str] | None = None,
        tool_types: set[str] | None = None,
        encrypted_reasoning: bool = False,
        leading_items: list[dict[str, Any]] | None = None,
        logprobs: bool = False,
        parallel_tool_calls: bool = True,
        ids: Callable[[str], str] = new_id,
        announced: bool = False,
        mcp_tools: dict[str, str] | None = None,
        mcp_approvals: set[str] | None = None,
        prefill_only: bool = False,
        compaction_trigger: bool = False,
    ) -> None:
        self.response = response
        #: A warm-up (`generate: false`): the model says nothing, and the output is empty (no empty message).
        self._prefill_only = prefill_only
        #: Offered functions that are MCP servers' tools: name -> server_label (their calls are this server's).
        self._mcp_tools = mcp_tools or {}
        #: Those of them whose calls wait for the client's approval (an mcp_approval_request, not a call).
        self._mcp_approvals = mcp_approvals or set()
        #: A round asked for approvals: the response ends after it.
        self.awaits_approval = False
        #: A round called client tools beside MCP ones: the response ends after its MCP calls, with these.
        self.client_calls: list[ClientCall] = []
        #: Tool rounds so far (see mcp_round): their items went into `_leading`.
        self.rounds = 0
        #: Where item and call ids come from: a takeover replays the ids the first run gave out.
        self._ids = ids
        self._functions = functions or {}
        self._custom_tools = custom_tools or set()
        #: Offered client-executed tool types (shell, apply_patch...): called under their type's name.
        self._tool_types = tool_types or set()
        self._tags = reasoning_tags
        self._encrypted_reasoning = encrypted_reasoning
        #: Items that exist before the model speaks (a compaction item): sent first, and first in the output.
        self._leading: list[Item] = [STORED_ITEM.validate_python(item) for item in leading_items or []]
        #: The leading compaction item answers a compaction_trigger: its events say `compacting` between them.
        self._compaction_trigger = compaction_trigger
        self._logprobs = TokenLogprobs() if logprobs else None
        self._parallel_tool_calls = parallel_tool_calls
        #: The API sent the opening events (see `opening_events`): ours follow them.
        self._announced = announced
        self._sequence = len(OPENING_EVENT_TYPES) if announced else 0
        self._raw = ""  # everything the model said
        self._phase = "undecided" if reasoning_tags else "answer"
        self._reasoning: StoredReasoning | None = None
        self._reasoning_from = 0
        self._reasoning_sent = 0
        self._reasoning_pieces = 0
        self._message: MessageItem | None = None
        self._answer_from = 0  # where the answer starts in _raw
        self._sent = 0  # how far the answer went out as message text
        self._calls_from: int | None = None  # where the first call tag starts

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _lifecycle(self, kind: str) -> ResponseLifecycleEvent:
        snapshot = self.response.model_copy(deep=True)
        return ResponseLifecycleEvent(type=f"response.{kind}", sequence_number=self._next(), response=snapshot)

    def start(self) -> list[ResponseEvent]:
        events: list[ResponseEvent] = [] if self._announced else [self._lifecycle("created")]
        events.append(self._lifecycle("in_progress"))
        for index, item in enumerate(self._leading):
            if isinstance(item, StoredMcpListTools):
                events += list_tools_events(item, index, self._next)
                continue
            events.append(self._item_event("response.output_item.added", index, item))
            if self._compaction_trigger and isinstance(item, StoredCompaction):
                events.append(
                    CompactionCompactingEvent(sequence_number=self._next(), item_id=item.id, output_index=index)
                )
            events.append(self._item_event("response.output_item.done", index, item))
        return events

    def _item_event(self, kind: str, index: int, item: Item) -> OutputItemEvent:
        return OutputItemEvent(type=kind, sequence_number=self._next(), output_index=index, item=item)

    @property
    def _reasoning_index(self) -> int:
        return len(self._leading)

    # Reasoning -----------------------------------------------------------------------------------------

    def _decide(self) -> list[ResponseEvent]:
        """Is the output opening with a reasoning section? Undecided while it could still be."""
        assert self._tags is not None
        opening = len(self._raw) - len(self._raw.lstrip())
        rest = self._raw[opening:]
        if rest.startswith(self._tags[0]):
            self._phase = "reasoning"
            self._reasoning_from = self._reasoning_sent = opening + len(self._tags[0])
            self._reasoning = StoredReasoning(id=self._ids("rs"), content=[], status="in_progress")
            return [
                OutputItemEvent(
                    type="response.output_item.added",
                    sequence_number=self._next(),
                    output_index=self._reasoning_index,
                    item=self._reasoning.model_copy(deep=True),
                )
            ]
        if not self._tags[0].startswith(rest):
            self._phase = "answer"
        return []

    def _send_reasoning(self, upto: int) -> list[ResponseEvent]:
        assert self._reasoning is not None
        delta = self._raw[self._reasoning_sent : upto]
        if not delta:
            return []
        self._reasoning_sent = upto
        return [
            ReasoningTextDeltaEvent(
                sequence_number=self._next(),
                item_id=self._reasoning.id,
                output_index=self._reasoning_index,
                content_index=0,
                delta=delta,
            )
        ]

    def _close_reasoning(self, status: str) -> list[ResponseEvent]:
        assert self._reasoning is not None
        text = self._raw[self._reasoning_from : self._reasoning_sent]
        encrypted = encode_reasoning(text) if self._encrypted_reasoning else None
        self._reasoning = self._reasoning.model_copy(
            update={"content": [ReasoningText(text=text)], "status": status, "encrypted_content": encrypted}
        )
        return item_done_events(self._reasoning, self._reasoning_index, self._next)

    def _reason(self) -> list[ResponseEvent]:
        assert self._tags is not None
        self._reasoning_pieces += 1
        close = self._raw.find(self._tags[1], self._reasoning_from)
        if close < 0:
            return self._send_reasoning(len(self._raw) - held_back(self._raw, self._tags[1]))
        events = [*self._send_reasoning(close), *self._close_reasoning("completed")]
        self._phase = "answer"
        self._answer_from = self._sent = close + len(self._tags[1])
        return events

    # The answer ----------------------------------------------------------------------------------------

    @property
    def _message_index(self) -> int:
        return self._reasoning_index + (1 if self._reasoning is not None else 0)

    def _part_event(self, kind: str, message: MessageItem, part: OutputText) -> ContentPartEvent:
        return ContentPartEvent(
            type=kind,
            sequence_number=self._next(),
            item_id=message.id,
            output_index=self._message_index,
            content_index=0,
            part=part,
        )

    def _open_message(self) -> list[ResponseEvent]:
        message = MessageItem(id=self._ids("msg"), role="assistant", content=[], status="in_progress")
        self._message = message
        return [
            OutputItemEvent(
                type="response.output_item.added",
                sequence_number=self._next(),
                output_index=self._message_index,
                item=message.model_copy(deep=True),
            ),
            self._part_event("response.content_part.added", message, OutputText(type="output_text", text="")),
        ]

    def _send_text(self, upto: int) -> list[ResponseEvent]:
        if self._message is None:  # the answer starts after the whitespace that follows the reasoning
            while self._sent < upto and self._raw[self._sent].isspace():
                self._sent += 1
            self._answer_from = self._sent
        delta = self._raw[self._sent : upto]
        if not delta:
            return []
        events = self._open_message() if self._message is None else []
        assert self._message is not None
        start, self._sent = self._sent, upto
        events.append(
            OutputTextDeltaEvent(
                sequence_number=self._next(),
                item_id=self._message.id,
                output_index=self._message_index,
                content_index=0,
                delta=delta,
                logprobs=self._logprobs.for_event(delta, start) if self._logprobs else [],
            )
        )
        return events

    def _answer(self) -> list[ResponseEvent]:
        if self._calls_from is not None:
            return []
        if not self._functions:
            return self._send_text(len(self._raw))
        tag = self._raw.find(CALL_OPEN, self._sent)
        if tag >= 0:
            self._calls_from = tag
            return self._send_text(tag)
        return self._send_text(len(self._raw) - held_back(self._raw))

    def text(self, piece: str | ScoredPiece) -> list[ResponseEvent]:
        if isinstance(piece, ScoredPiece):
            if self._logprobs is not None:
                self._logprobs.add(piece, len(self._raw))
            piece = piece.text
        elif self._logprobs is not None:
            self._logprobs.extend_last(len(self._raw) + len(piece))
        self._raw += piece
        events = self._decide() if self._phase == "undecided" else []
        if self._phase == "reasoning":
            events += self._reason()
        if self._phase == "answer":
            events += self._answer()
        return events

    def steerable(self) -> bool:
        """Whether the output may stop here for steering input: not inside a call (its tag opened, or perhaps
        opening), whose arguments would be cut."""
        return self._calls_from is None and not (self._functions and held_back(self._raw))

    # Function calls ------------------------------------------------------------------------------------

    def _parsed_calls(self, completed: bool) -> list[ParsedCall]:
        """The calls from the first call tag on: of a completed output, all well formed or none (it was text);
        of a cut one, those it got to (see parse_cut_calls: its call markup is never text)."""
        if self._calls_from is None:
            return []
        kinds = {
            name: "custom" if name in self._custom_tools else name if name in self._tool_types else "function"
            for name in self._functions
        }
        calls_text = self._raw[self._calls_from :]
        if not completed:
            return parse_cut_calls(calls_text, kinds)
        parsed = parse_calls(calls_text, kinds)
        if parsed is None:  # not well-formed calls after all: it was text
            self._calls_from = None
            return []
        return parsed

    def _calls(self, completed: bool) -> list[ClientCall]:
        parsed = self._parsed_calls(completed)
        if not self._parallel_tool_calls:
            parsed = parsed[:1]
        # An MCP tool's call is never the client's (a cut one is dropped: it was not made).
        client = [call for call in parsed if call.name not in self._mcp_tools]
        return call_items(client, self._functions, self._custom_tools, self._ids, self._tool_types)

    # The end -------------------------------------------------------------------------------------------

    def _answer_part(self) -> OutputText:
        text = self._raw[self._answer_from : self._sent]
        logprobs = self._logprobs.for_part(text, self._answer_from) if self._logprobs else []
        return OutputText(type="output_text", text=text, logprobs=logprobs)

    def _close_message(self, status: str) -> list[ResponseEvent]:
        assert self._message is not None
        part = self._answer_part()
        message = self._message.model_copy(
            update={"content": [part], "status": "completed" if status == "completed" else "incomplete"}
        )
        self._message = message
        logprobs = self._logprobs.for_event(part.text, self._answer_from) if self._logprobs else []
        return item_done_events(message, self._message_index, self._next, logprobs=logprobs)

    def finish(self, finish: Finish, *, completed_at: int) -> list[ResponseEvent]:
        """Close the output items and the response; `self.response` is then the final Response to store."""
        status = FINAL_STATUS[finish.reason]
        events: list[ResponseEvent] = []
        if self._phase == "undecided":  # only whitespace, or the start of a tag that never came
            self._phase = "answer"
        if self._phase == "reasoning":  # cut off while reasoning
            events += [*self._send_reasoning(len(self._raw)), *self._close_reasoning("incomplete")]
        events += close_open_calls(self._leading, self._next)
        # A round's client calls (see mcp_round) end the response, unless it was cancelled.
        kept = self.client_calls if status != "cancelled" else []
        calls = [*kept, *self._calls(completed=status == "completed")]
        if self._calls_from is None:
            # A cut output may end in the start of a call tag: markup, not text.
            cut_tag = held_back(self._raw) if self._functions and status != "completed" else 0
            events += self._send_text(len(self._raw) - cut_tag)
        if self._message is None and not calls and not self.rounds and not self._prefill_only:
            events += self._open_message()
        if self._message is not None:
            events += self._close_message(status)
        first_call = self._message_index + (1 if self._message is not None else 0)
        for offset, call in enumerate(calls):
            events += call_events(call, first_call + offset, self._next)
        finished: list[Item] = [item for item in (self._reasoning, self._message) if item is not None]
        self.response.output = [*self._leading, *finished, *calls]
        self.response.status = status  # type: ignore[assignment]
        self.response.usage = Usage(
            input_tokens=finish.prompt_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=finish.cached_tokens),
            output_tokens=finish.output_tokens,
            # NOTE: counted as the text pieces of the reasoning section, one a token but for split UTF-8.
            output_tokens_details=OutputTokensDetails(
                reasoning_tokens=min(self._reasoning_pieces, finish.output_tokens)
            ),
            total_tokens=finish.prompt_tokens + finish.output_tokens,
        )
        if status == "incomplete":
            reason = "steered" if finish.reason == "steered" else "max_output_tokens"
            self.response.incomplete_details = IncompleteDetails(reason=reason)
        if status == "completed":
            self.response.completed_at = completed_at
        events.append(self._lifecycle(status))
        return events

    def fail(self, message: str, *, code: str = "server_error") -> list[ResponseEvent]:
        """The opened items closed as `incomplete` (so a stream's reader sees every item end), then the `error`
        event and `response.failed`, the output so far in its response."""
        events: list[ResponseEvent] = []
        if self._phase == "reasoning":
            events += [*self._send_reasoning(len(self._raw)), *self._close_reasoning("incomplete")]
        if self._message is not None and self._message.status == "in_progress":
            events += self._close_message("incomplete")
        events += close_open_calls(self._leading, self._next)
        finished: list[Item] = [item for item in (self._reasoning, self._message) if item is not None]
        self.response.status = "failed"
        self.response.error = ResponseError(code=code, message=message)
        self.response.output = [*self._leading, *finished]
        events.append(ErrorEvent(sequence_number=self._next(), code=code, message=message))
        events.append(self._lifecycle("failed"))
        return events

    # MCP tool rounds -----------------------------------------------------------------------------------

    def output_so_far(self) -> list[dict[str, Any]]:
        """The output items the response has so far (its leading items, then its tool rounds'), as stored: what
        the next tool round's prompt renders (app/jobs/tool_loop.py)."""
        return [item.model_dump(mode="json") for item in self._leading]

    def mcp_round(self) -> tuple[list[ResponseEvent], list[StoredMcpCall], str] | None:
        """The model ended its turn calling MCP tools: its reasoning and text close, its MCP calls open (in
        progress), and the next round starts empty. Returns the events, the calls, and the round's text (which
        continues the prompt); None when this turn called no MCP tool (finish() ends it).

        A turn that called client tools (functions, custom tools) too keeps those in `client_calls`: the response
        makes its MCP calls, then ends with them (as function_call items after the mcp_calls) for the client."""
        if not self._mcp_tools or self._phase == "reasoning":
            return None
        if self._phase == "undecided":
            self._phase = "answer"
        parsed = self._parsed_calls(completed=True)
        if not self._parallel_tool_calls:
            parsed = parsed[:1]
        if not any(call.name in self._mcp_tools for call in parsed):
            return None
        client = [call for call in parsed if call.name not in self._mcp_tools]
        parsed = [call for call in parsed if call.name in self._mcp_tools]
        events: list[ResponseEvent] = []
        if self._message is not None:
            events += self._close_message("completed")
        finished: list[Item] = [item for item in (self._reasoning, self._message) if item is not None]
        self._leading += finished
        wanted = [
            {"name": call.name, "arguments": call.arguments, "server_label": self._mcp_tools[call.name]}
            for call in parsed
        ]
        opening, calls = self.open_calls(wanted)
        events += opening
        self.client_calls = call_items(client, self._functions, self._custom_tools, self._ids)
        text = self._raw
        self._raw, self._phase = "", "undecided" if self._tags else "answer"
        self._reasoning, self._message, self._calls_from = None, None, None
        self._reasoning_from = self._reasoning_sent = self._answer_from = self._sent = 0
        if self._logprobs is not None:
            self._logprobs = TokenLogprobs()
        return events, calls, text

    def open_calls(self, wanted: list[dict[str, str]]) -> tuple[list[ResponseEvent], list[StoredMcpCall]]:
        """A round's MCP calls opened (see open_tool_calls); after an mcp_approval_request the response ends."""
        items, events = open_tool_calls(wanted, self._mcp_approvals, len(self._leading), self._next, self._ids)
        self._leading += items
        self.awaits_approval = self.awaits_approval or any(item.type == "mcp_approval_request" for item in items)
        self.rounds += 1
        return events, [item for item in items if isinstance(item, StoredMcpCall)]

    def mcp_call_done(self, call: StoredMcpCall) -> list[ResponseEvent]:
        """`call` (an open one, as mcp_round gave it) ended: its output or error in, its item closed."""
        index = next(position for position, item in enumerate(self._leading) if item.id == call.id)
        self._leading[index] = call
        return call_closing_events(call, index, self._next)
