"""What a dialect's parser reads out of the model's text, in order (segments), and the parser's interface.

A parser is fed the model's text a piece at a time and answers with the segments each piece made certain: reasoning,
answer text, and tool calls (opened once their name is read, their arguments as they come, closed). Text that may
still turn out to be markup (the start of a tag) is held back until it is clear. Segments carry no events: the
assembler (app/events/assembler.py) turns them into the API's items and events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

#: What a tool is to the parser: a function (JSON arguments) or a custom tool (free text, its `input`); the
#: client tool types read as functions (their arguments are checked where their items are built).
ToolKinds = Mapping[str, str]
#: A message's phase (the SDK's ResponseOutputMessage.phase): harmony's `commentary` channel before a call.
Phase = Literal["commentary", "final_answer"]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """The reasoning section closed (a cut leaves it open: the assembler closes it incomplete)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Answer text; `start` is where it sits in the model's whole text (its tokens' logprobs are found by it)."""

    text: str
    start: int
    phase: Phase | None = None


@dataclass(frozen=True, slots=True)
class TextEnd:
    """The message the text was in ended (a channel's end): what follows opens another item."""


@dataclass(frozen=True, slots=True)
class CallStart:
    name: str


@dataclass(frozen=True, slots=True)
class CallDelta:
    """More of the open call's arguments (JSON text), or of a custom tool's input (plain text)."""

    text: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    """The open call ended. `arguments`: the whole arguments (JSON object text; a custom tool's input), which the
    deltas add up to; `complete`: False for a call a cut ended, or whose arguments are not a JSON object."""

    arguments: str
    complete: bool = True
    #: The call as written, and where it starts in the whole text (0: unknown): what is said instead of a call
    #: whose arguments its client could not run (a client tool type's).
    markup: str = ""
    markup_at: int = 0


Segment = ReasoningDelta | ReasoningEnd | TextDelta | TextEnd | CallStart | CallDelta | CallEnd


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """What a parser knows of the request: the tools it may call (name -> kind: "function", "custom" or a client
    tool type's name), their parameters' JSON types (for syntaxes that write arguments as text, not JSON), and
    whether the prompt already opened the reasoning section (the template's generation prompt ended in it)."""

    tools: ToolKinds = field(default_factory=dict)
    parameter_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    reasoning_open: bool = False
    #: Read reasoning out of the text at all (False: the model has no reasoning section, all of it is answer).
    reasoning: bool = True


class OutputParser(Protocol):
    def feed(self, piece: str) -> list[Segment]:
        """`piece` appended to the text: the segments it made certain."""
        ...

    def end(self, *, cut: bool) -> list[Segment]:
        """The text ended (`cut`: by the token limit or a cancel, not by the model): what was held back, and the
        open call closed (incomplete when cut inside it; dropped before its name was read)."""
        ...

    def in_call(self) -> bool:
        """Whether the text is inside a call (or may be opening one): a steer must not cut here."""
        ...

    def in_reasoning(self) -> bool:
        """Whether the text is inside the reasoning section (its pieces count as reasoning tokens)."""
        ...


def held_back(text: str, markers: tuple[str, ...], start: int = 0) -> int:
    """How many trailing characters of `text[start:]` could be the start of one of `markers`, and must wait."""
    longest = 0
    tail_room = len(text) - start
    for marker in markers:
        for length in range(min(len(marker) - 1, tail_room), longest, -1):
            if text.endswith(marker[:length]):
                longest = length
                break
    return longest


def find_first(text: str, markers: tuple[str, ...], start: int) -> tuple[int, str]:
    """The earliest of `markers` in `text` from `start`: (index, marker), or (-1, "")."""
    best, found = -1, ""
    for marker in markers:
        index = text.find(marker, start)
        if index >= 0 and (best < 0 or index < best or (index == best and len(marker) > len(found))):
            best, found = index, marker
    return best, found
