"""What a chat template can render, found by rendering it (llama.cpp's common/jinja/caps.cpp, probe for probe):
string or typed content, a system role, a tools list, calls in `tool_calls` (with arguments as an object or as
JSON text), parallel calls, reasoning kept in the history; and which variables it reads."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import meta

from app.generation.chat.environment import ChatEnvironment, fixed_source, tojson


class _Tracked(dict[str, Any]):
    """A probe's mapping that records which of its keys the template read."""

    def __init__(self, values: dict[str, Any], reads: set[tuple[int, str]]) -> None:
        super().__init__({key: _track(value, reads) for key, value in values.items()})
        self._reads = reads

    def __getitem__(self, key: str) -> Any:
        self._reads.add((id(self), key))
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            self._reads.add((id(self), key))
        return super().get(key, default)

    # NOTE: llama.cpp marks a value read when the template uses it, however it got it; a loop over a mapping's
    # items nearly always uses them, so its values count as read (Qwen3-Coder reads arguments this way).
    def items(self) -> Any:
        self._reads.update((id(self), key) for key in self)
        return super().items()

    def values(self) -> Any:
        self._reads.update((id(self), key) for key in self)
        return super().values()


def _track(value: Any, reads: set[tuple[int, str]]) -> Any:
    if isinstance(value, dict):
        return _Tracked(value, reads)
    if isinstance(value, list):
        return [_track(element, reads) for element in value]
    return value


def _read_all(value: Any, reads: set[tuple[int, str]]) -> None:
    """`tojson` reads all of a value (llama.cpp marks it used deeply)."""
    if isinstance(value, dict):
        for key, element in value.items():
            reads.add((id(value), key))
            _read_all(element, reads)
    elif isinstance(value, list):
        for element in value:
            _read_all(element, reads)


class _Probe:
    """One template compiled in an environment that records what it reads."""

    def __init__(self, source: str) -> None:
        self.reads: set[tuple[int, str]] = set()
        environment = ChatEnvironment()
        environment.filters["tojson"] = self._tojson
        environment.filters["string"] = self._string
        self.template = environment.from_string(fixed_source(source))

    def _tojson(self, value: Any, *args: Any, **kwargs: Any) -> str:
        _read_all(value, self.reads)
        return tojson(value, *args, **kwargs)

    def _string(self, value: Any) -> str:
        _read_all(value, self.reads)  # llama.cpp's `string` of a mapping or a list reads all of it
        return str(value)

    def run(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **extra: Any) -> Probed:
        self.reads = set()
        tracked_messages = _track(messages, self.reads)
        tracked_tools = _track(tools or [], self.reads)
        try:
            output = self.template.render(
                messages=tracked_messages,
                tools=tracked_tools,
                bos_token="",
                eos_token="",
                add_generation_prompt=True,
                **extra,
            )
        except Exception:  # a probe that fails tells as much as one that renders
            return Probed(False, "", tracked_messages, tracked_tools, self.reads)
        return Probed(True, output, tracked_messages, tracked_tools, self.reads)


@dataclass(frozen=True, slots=True)
class Probed:
    rendered: bool
    output: str
    messages: Any
    tools: Any
    reads: set[tuple[int, str]]

    def read(self, mapping: Any, key: str) -> bool:
        return (id(mapping), key) in self.reads


@dataclass(frozen=True, slots=True)
class TemplateCaps:
    """llama.cpp's `caps` of a template, and the variables it reads beyond the messages."""

    supports_string_content: bool = True
    supports_typed_content: bool = False
    supports_system_role: bool = True
    supports_tools: bool = True
    supports_tool_calls: bool = True
    supports_parallel_tool_calls: bool = True
    supports_object_arguments: bool = False
    supports_preserve_reasoning: bool = False
    #: The variables the template reads that no message gives it (`enable_thinking`, `reasoning_effort`, ...).
    variables: frozenset[str] = frozenset()

    @property
    def supports_reasoning_effort(self) -> bool:
        """It reads `reasoning_effort` or its alias `reasoning_strength` (NOTE: anywhere in it; llama.cpp's probe
        counts one render's reads)."""
        return bool({"reasoning_effort", "reasoning_strength"} & self.variables)


_TOOL = {
    "name": "tool",
    "type": "function",
    "function": {
        "name": "tool1",
        "description": "Tool description",
        "parameters": {
            "type": "object",
            "properties": {"arg": {"type": "string", "description": "Arg description"}},
            "required": ["arg"],
        },
    },
}


def _call_conversation(arguments: Any, calls: int = 1) -> list[dict[str, Any]]:
    tool_calls = [
        {"id": f"call0000{index + 1}", "type": "function", "function": {"name": "tool1", "arguments": arguments}}
        for index in range(calls)
    ]
    return [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": tool_calls},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


def _content_caps(probe: _Probe) -> dict[str, bool]:
    """String content, else typed content ([{type: text, text}]) where only that renders the text."""
    marker = "STRING_MARKER"
    plain = probe.run([{"role": "user", "content": marker}])
    if plain.rendered and marker in plain.output:
        return {}
    typed = probe.run([{"role": "user", "content": [{"type": "text", "text": marker}]}])
    if typed.rendered and marker in typed.output:
        return {"supports_string_content": False, "supports_typed_content": True}
    return {}


def _tool_caps(probe: _Probe) -> dict[str, bool]:
    """Tools, calls and the form of their arguments, then parallel calls (caps.cpp's order)."""
    found: dict[str, bool] = {}
    as_object = probe.run(_call_conversation({"arg": "value"}), [_TOOL])
    if as_object.rendered:
        tool_calls = dict.get(as_object.messages[1], "tool_calls")  # unrecorded: the template's reads alone count
        found["supports_tools"] = as_object.read(as_object.tools[0]["function"], "name")
        found["supports_tool_calls"] = as_object.read(as_object.messages[1], "tool_calls")
        if found["supports_tool_calls"] and tool_calls is not None:
            found["supports_object_arguments"] = as_object.read(tool_calls[0]["function"]["arguments"], "arg")
    if not found.get("supports_object_arguments"):
        as_text = probe.run(_call_conversation('{"arg": "value"}'), [_TOOL])
        if not as_text.rendered:
            return {"supports_tools": False, "supports_tool_calls": False, "supports_parallel_tool_calls": False}
        found["supports_tools"] = as_text.read(as_text.tools[0]["function"], "name")
        found["supports_tool_calls"] = as_text.read(as_text.messages[1], "tool_calls")
    arguments: Any = {"arg": "value"} if found.get("supports_object_arguments") else '{"arg": "value"}'
    parallel = probe.run(_call_conversation(arguments, calls=2), [_TOOL])
    found["supports_parallel_tool_calls"] = parallel.rendered and parallel.read(
        parallel.messages[1]["tool_calls"][1], "function"
    )
    return found


def _reasoning_caps(probe: _Probe) -> dict[str, bool]:
    placeholder = "<REASONING_CONTENT_PLACEHOLDER>"
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message", "reasoning_content": placeholder},
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
        {"role": "user", "content": "User message"},
    ]
    kept = probe.run(turns, None, enable_thinking=True, **preserved_reasoning(True))
    return {"supports_preserve_reasoning": placeholder in kept.output}


def preserved_reasoning(enabled: bool) -> dict[str, bool]:
    """The variables llama.cpp derives from `preserve_reasoning` (caps_apply_preserve_reasoning)."""
    return {
        "preserve_thinking": enabled,
        "clear_thinking": not enabled,
        "truncate_history_thinking": not enabled,
        "drop_thinking": not enabled,
    }


def template_variables(source: str, environment: jinja2.Environment | None = None) -> frozenset[str]:
    """The names a template reads that it does not set itself (a static reading: a superset of what one render
    reads)."""
    parsed = (environment or ChatEnvironment()).parse(fixed_source(source))
    return frozenset(meta.find_undeclared_variables(parsed))


def detect_caps(source: str) -> TemplateCaps:
    probe = _Probe(source)
    probes: Iterable[Callable[[_Probe], dict[str, bool]]] = (_content_caps, _tool_caps, _reasoning_caps)
    found: dict[str, bool] = {}
    for run in probes:
        found.update(run(probe))
    system = probe.run([{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}])
    found["supports_system_role"] = system.read(system.messages[0], "content")
    return TemplateCaps(**found, variables=template_variables(source))
