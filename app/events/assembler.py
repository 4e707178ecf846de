"""Generation output -> the Response it builds and the stream events on the way (one path for JSON and SSE).

The model's text is read by its family's parser (app/generation/dialects): reasoning, answer text and tool calls,
in the family's own syntax, each as soon as it is certain (text that may be the start of markup is held back
until it is clear). Their items and events are made by RoundItems (output_items.py): reasoning and messages as
they come, function and custom tool calls streamed as they are written (the calls of a response that may call
MCP tools, and of client tool types, whole at the end).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator

from app.events.call_items import ClientCall, call_events, call_items
from app.events.hosted_calls import citations, for_prompt, shown, sources
from app.events.logprobs import TokenLogprobs
from app.events.mcp_items import call_closing_events, close_open_calls, list_tools_events, open_tool_calls
from app.events.output_items import CallRouting, RoundItems
from app.generation.dialects.families import CONVENTION, dialect_named
from app.generation.dialects.segments import ParseOptions, TextDelta
from app.generation.dialects.tagged import PlainParser
from app.generation.tool_calls import CLIENT_TOOL_PARAMETERS, ParsedCall
from app.generation.types import Finish, ScoredPiece
from app.ids import new_id
from app.schemas.events import (
    CompactionCompactingEvent,
    ErrorEvent,
    OutputItemEvent,
    ResponseEvent,
    ResponseLifecycleEvent,
)
from app.schemas.items import STORED_ITEM, Item, StoredCompaction, StoredMcpCall, StoredMcpListTools
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


def _runnable(call: ParsedCall, tool_types: set[str]) -> bool:
    """Whether a whole call of a client tool type has arguments its client can run (a cut one says how far it
    got; anything else is a call as written)."""
    fixed = CLIENT_TOOL_PARAMETERS.get(call.name) if call.name in tool_types else None
    if fixed is None or not call.complete:
        return True
    try:
        return Draft202012Validator(fixed).is_valid(json.loads(call.arguments))
    except json.JSONDecodeError:
        return False


class ResponseAssembler:
    """Grows one Response from text pieces; every method returns the events that step produced, in order.

    `functions` maps each offered function name to its namespace (None outside a namespace); `dialect` names the
    model family whose syntax its text is read in (app/generation/dialects), `reasoning_tags` its reasoning markers
    in use, if it has any, and `reasoning_open` says that the prompt already opened the reasoning section. With
    `logprobs`, the pieces are ScoredPieces and the answer's part and deltas carry their tokens' logprobs.
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
        dialect: str = CONVENTION.name,
        reasoning_open: bool = False,
        parameter_types: dict[str, dict[str, str]] | None = None,
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
        self._routing = CallRouting(
            self._functions, self._custom_tools, self._tool_types, self._mcp_tools, parallel_tool_calls
        )
        self._dialect = dialect_named(dialect)
        self._tags = reasoning_tags
        kinds = {
            name: "custom" if name in self._custom_tools else name if name in self._tool_types else "function"
            for name in self._functions
        }
        self._options = ParseOptions(kinds, parameter_types or {}, reasoning_open, reasoning_tags is not None)
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
        self._reasoning_pieces = 0
        self._new_round()

    def _new_round(self) -> None:
        self._raw = ""  # everything the model said this round
        self._parser = self._dialect.parser(self._options, self._tags)
        #: No tools and no reasoning: every piece is answer text, sent without the parser (the per-token path).
        self._plain = isinstance(self._parser, PlainParser)
        #: Its pieces may be reasoning (they count as reasoning tokens).
        self._reads_reasoning = self._options.reasoning or self._dialect.tagged is None
        self._round = RoundItems(
            len(self._leading), self._routing, self._next, self._ids, self._logprobs, self._encrypted_reasoning
        )
        self._round.annotate = self._annotate
        #: The parser was told the text ended (mcp_round did, and finish must not again).
        self._ended = False
        #: Events that telling it made in an mcp_round that found no MCP call: finish sends them first.
        self._unsent: list[ResponseEvent] = []

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

    # The text --------------------------------------------------------------------------------------------------

    def text(self, piece: str | ScoredPiece) -> list[ResponseEvent]:
        if isinstance(piece, ScoredPiece):
            if self._logprobs is not None:
                self._logprobs.add(piece, len(self._raw))
            piece = piece.text
        elif self._logprobs is not None:
            self._logprobs.extend_last(len(self._raw) + len(piece))
        start = len(self._raw)
        self._raw += piece
        if self._plain:
            return self._round.say(piece, start) if piece else []
        if not self._reads_reasoning:
            return self._round.take(self._parser.feed(piece))
        reasoning = self._parser.in_reasoning()
        events = self._round.take(self._parser.feed(piece))
        if reasoning or self._parser.in_reasoning():
            self._reasoning_pieces += 1
        return events

    def steerable(self) -> bool:
        """Whether the output may stop here for steering input: not inside a call (its markup opened, or perhaps
        opening), whose arguments would be cut."""
        return self._plain or not self._parser.in_call()

    def _end_text(self, *, cut: bool) -> list[ResponseEvent]:
        """The parser told the text ended (once a round): what it held back, the open call closed."""
        unsent, self._unsent = self._unsent, []
        if self._ended:
            return unsent
        self._ended = True
        return unsent + self._round.take(self._parser.end(cut=cut))

    def _client_calls(self) -> tuple[list[ClientCall], list[ResponseEvent]]:
        """The calls kept whole for the end (not streamed), as items: a cut MCP tool's is dropped (it was not
        made); a client tool type's whose arguments its client could not run is said as text instead."""
        parsed = [call for call in self._round.parsed if call.name not in self._mcp_tools]
        runnable = [call for call in parsed if _runnable(call, self._tool_types)]
        events: list[ResponseEvent] = []
        for call in parsed:
            if call not in runnable and call.markup:
                events += self._round.take([TextDelta(call.markup, call.markup_at)])
        items = call_items(runnable, self._functions, self._custom_tools, self._ids, self._tool_types)
        return items, events

    # The end -------------------------------------------------------------------------------------------------------

    def finish(self, finish: Finish, *, completed_at: int) -> list[ResponseEvent]:
        """Close the output items and the response; `self.response` is then the final Response to store."""
        status = FINAL_STATUS[finish.reason]
        events = self._end_text(cut=status != "completed")
        round_items = self._round
        if round_items.reasoning_open():  # cut off while reasoning
            events += round_items.close("incomplete")
        events += close_open_calls(self._leading, self._next)
        parsed, said = self._client_calls()
        events += said
        events += round_items.close("completed" if status == "completed" else "incomplete")
        # A round's client calls (see mcp_round) end the response, unless it was cancelled.
        kept = self.client_calls if status != "cancelled" else []
        calls = [*kept, *parsed]
        has_output = round_items.has_message() or round_items.has_calls() or calls
        if not has_output and not self.rounds and not self._prefill_only:
            events += round_items.empty_message()
            events += round_items.close("completed" if status == "completed" else "incomplete")
        first_call = len(self._leading) + len(round_items.items)
        for offset, call in enumerate(calls):
            events += call_events(call, first_call + offset, self._next)
        self.response.output = shown([*self._leading, *round_items.items, *calls])
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
        events = self._round.close("incomplete")
        events += close_open_calls(self._leading, self._next)
        self.response.status = "failed"
        self.response.error = ResponseError(code=code, message=message)
        self.response.output = shown([*self._leading, *self._round.items])
        events.append(ErrorEvent(sequence_number=self._next(), code=code, message=message))
        events.append(self._lifecycle("failed"))
        return events

    # MCP tool rounds -----------------------------------------------------------------------------------

    def output_so_far(self) -> list[dict[str, Any]]:
        """The output items the response has so far (its leading items, then its tool rounds'), as stored: what
        the next tool round's prompt renders (app/jobs/tool_loop.py): a hosted call's output its results, numbered."""
        return for_prompt([item.model_dump(mode="json") for item in self._leading])

    def _annotate(self, text: str) -> list[dict[str, Any]]:
        """The citations of an answer's text: of the results the response's hosted calls showed the model."""
        found = sources(self._leading)
        return citations(text, found) if found else []

    def mcp_round(self) -> tuple[list[ResponseEvent], list[StoredMcpCall], str] | None:
        """The model ended its turn calling MCP tools: its reasoning and text close, its MCP calls open (in
        progress), and the next round starts empty. Returns the events, the calls, and the round's text (which
        continues the prompt); None when this turn called no MCP tool (finish() ends it).

        A turn that called client tools (functions, custom tools) too keeps those in `client_calls`: the response
        makes its MCP calls, then ends with them (as function_call items after the mcp_calls) for the client."""
        if not self._mcp_tools or self._round.reasoning_open():
            return None
        events = self._end_text(cut=False)
        parsed = [call for call in self._round.parsed if call.complete]
        if self._round.reasoning_open() or not any(call.name in self._mcp_tools for call in parsed):
            self._unsent = events  # finish() sends them
            return None
        client = [call for call in parsed if call.name not in self._mcp_tools]
        parsed = [call for call in parsed if call.name in self._mcp_tools]
        events += self._round.close("completed")
        self._leading += self._round.items
        wanted = [
            {"name": call.name, "arguments": call.arguments, "server_label": self._mcp_tools[call.name]}
            for call in parsed
        ]
        opening, calls = self.open_calls(wanted)
        events += opening
        self.client_calls = call_items(
            [call for call in client if _runnable(call, self._tool_types)],
            self._functions,
            self._custom_tools,
            self._ids,
        )
        text = self._raw
        self._new_round()
        if self._logprobs is not None:
            self._logprobs = TokenLogprobs()
            self._round = RoundItems(
                len(self._leading), self._routing, self._next, self._ids, self._logprobs, self._encrypted_reasoning
            )
            self._round.annotate = self._annotate
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
