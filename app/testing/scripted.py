"""A model that writes what a test scripts, in any family's syntax, through the real server path; and the same
output read straight through a family's parser.

ScriptedEngine stands where LlamaEngine does, behind the real LocalRunner: each request it is handed writes the
next scripted output (or the last one again), a token at a time, where a token is one character, or one whole
control token of the family's syntax (its markup tokens, as a real vocabulary holds them: `<|channel|>` is one
token of gpt-oss's). It honours max_output_tokens (a cut: `length`) and cancels, and ends with `stop`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from app.generation.dialects.families import Dialect, dialect_named
from app.generation.dialects.segments import (
    CallDelta,
    CallEnd,
    CallStart,
    ParseOptions,
    ReasoningDelta,
    ReasoningEnd,
    Segment,
    TextDelta,
    TextEnd,
)
from app.generation.request import GenerationRequest
from app.generation.types import Finish, FinishReason


def tokens_of(output: str, dialect: Dialect) -> Iterator[str]:
    """`output` cut as the scripted model writes it: the family's control tokens whole, else a character each."""
    markers = sorted(dialect.markup_tokens, key=len, reverse=True)
    index = 0
    while index < len(output):
        marker = next((marker for marker in markers if output.startswith(marker, index)), None)
        piece = marker or output[index]
        index += len(piece)
        yield piece


class ScriptedEngine:
    """LlamaEngine's interface to LocalRunner, writing scripted outputs (see the module's doc)."""

    slots = 4
    cached_bytes = 0

    def __init__(self, outputs: list[str] | None = None) -> None:
        #: What the next requests write, first first; the last one stays for every request after.
        self.outputs = list(outputs or [""])
        self.requests: list[GenerationRequest] = []
        self._requests: queue.SimpleQueue[GenerationRequest | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scripted-engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        if self._closed.is_set():  # as LlamaEngine: a closed engine ends what it is handed, cancelled
            request.emit(Finish("cancelled", len(request.prompt), 0, 0))
            return
        self._requests.put(request)

    def tokenize(self, text: str) -> list[int]:
        return [ord(character) for character in text]

    def close(self) -> None:
        """Stop; what was handed to it and not started ends cancelled (nobody waits for ever)."""
        self._closed.set()
        self._requests.put(None)
        self._thread.join()
        while not self._requests.empty():
            waiting = self._requests.get()
            if waiting is not None:
                waiting.emit(Finish("cancelled", len(waiting.prompt), 0, 0))

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            self.requests.append(request)
            output = self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]
            budget = request.sampling.max_output_tokens
            produced = 0
            reason: FinishReason = "stop"
            for piece in tokens_of(output, dialect_named(request.dialect)):
                if request.cancelled.is_set() or self._closed.is_set():
                    reason = "cancelled"
                    break
                if budget is not None and produced >= budget:
                    reason = "length"
                    break
                request.emit(piece)
                produced += 1
            request.emit(Finish(reason, len(request.prompt), 0, produced))


@dataclass
class Reading:
    """What a parser read out of one output: reasoning sections, messages (phase, text), calls (name, arguments,
    complete), in order; and every segment, to check how they came."""

    reasoning: list[str] = field(default_factory=list)
    messages: list[tuple[str | None, str]] = field(default_factory=list)
    calls: list[tuple[str, str, bool]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)


def read_output(
    dialect: str,
    output: str,
    tools: Mapping[str, str] | None = None,
    *,
    cut: bool = False,
    reasoning: tuple[str, str] | bool | None = True,
    reasoning_open: bool = False,
    parameter_types: Mapping[str, Mapping[str, str]] | None = None,
) -> Reading:
    """`output` fed to `dialect`'s parser a token at a time (tokens_of), then ended (`cut`: by the token limit);
    `reasoning`: the markers (True: the family's, False/None: none)."""
    family = dialect_named(dialect)
    markers = family.reasoning if reasoning is True else reasoning or None
    options = ParseOptions(dict(tools or {}), dict(parameter_types or {}), reasoning_open, markers is not None)
    parser = family.parser(options, markers)
    segments: list[Segment] = []
    for piece in tokens_of(output, family):
        segments += parser.feed(piece)
    segments += parser.end(cut=cut)
    return reading_of(segments)


def reading_of(segments: list[Segment]) -> Reading:
    reading = Reading(segments=segments)
    open_kind: str | None = None
    arguments: list[str] = []
    for segment in segments:
        if isinstance(segment, ReasoningDelta):
            if open_kind != "reasoning":
                reading.reasoning.append("")
            reading.reasoning[-1] += segment.text
            open_kind = "reasoning"
        elif isinstance(segment, TextDelta):
            if open_kind != "text" or reading.messages[-1][0] != segment.phase:
                if not segment.text.strip():
                    continue
                reading.messages.append((segment.phase, ""))
            phase, text = reading.messages[-1]
            reading.messages[-1] = (phase, text + segment.text)
            open_kind = "text"
        elif isinstance(segment, ReasoningEnd | TextEnd):
            open_kind = None
        elif isinstance(segment, CallStart):
            reading.calls.append((segment.name, "", False))
            arguments, open_kind = [], "call"
        elif isinstance(segment, CallDelta):
            arguments.append(segment.text)
        elif isinstance(segment, CallEnd):
            name, _, _ = reading.calls[-1]
            assert "".join(arguments) == segment.arguments, "a call's deltas add up to its arguments"
            reading.calls[-1] = (name, segment.arguments, segment.complete)
            open_kind = None
    reading.messages = [(phase, text.strip()) for phase, text in reading.messages if text.strip()]
    return reading
