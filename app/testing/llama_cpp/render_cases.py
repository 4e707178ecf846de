"""Conversations every chat template is rendered with, by us and by llama-server, for the render parity tests:
Responses items (system and developer turns, plain turns, tools offered, a call and its output, parallel calls,
reasoning, a custom tool, a compaction summary), and the one request each makes of a template."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.generation.chat.template import reasoning_variables
from app.generation.prompt import COMPACTION_SUMMARY, ChatMessage, build_context
from app.generation.tokenizer import ChatTokenizer
from app.generation.tool_calls import FunctionSpec, template_tool

WEATHER = FunctionSpec(
    "get_weather",
    "The weather in a city now.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PATCH = FunctionSpec("apply_diff", "Apply a diff to the tree.", {}, kind="custom")


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _call(call_id: str, city: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": f'{{"city": "{city}"}}'}


def _output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


@dataclass(frozen=True)
class RenderCase:
    name: str
    items: list[dict[str, Any]]
    instructions: str | None = "Be brief."
    tools: tuple[FunctionSpec, ...] = ()
    effort: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    RenderCase("plain turns", [_user("Hello"), _assistant("Hi there."), _user("How are you?")]),
    RenderCase(
        "developer turn",
        [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Answer in French."}]},
            _user("Hello"),
        ],
        instructions=None,
    ),
    RenderCase("tools offered", [_user("Weather in Paris?")], tools=(WEATHER,)),
    RenderCase(
        "a call and its output",
        [_user("Weather in Paris?"), _call("call_a1", "Paris"), _output("call_a1", "18 C, sunny")],
        tools=(WEATHER,),
    ),
    RenderCase(
        "parallel calls",
        [
            _user("Weather in Paris and Rome?"),
            _call("call_b1", "Paris"),
            _call("call_b2", "Rome"),
            _output("call_b1", "18 C"),
            _output("call_b2", "24 C"),
        ],
        tools=(WEATHER,),
    ),
    RenderCase(
        "reasoning",
        [
            _user("Is 7 prime?"),
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "7 has no divisors."}],
            },
            _assistant("Yes."),
            _user("And 9?"),
        ],
        effort="high",
    ),
    RenderCase(
        "a custom tool",
        [
            _user("Fix the typo."),
            {"type": "custom_tool_call", "call_id": "call_c1", "name": "apply_diff", "input": "-teh\n+the"},
            {"type": "custom_tool_call_output", "call_id": "call_c1", "output": "applied"},
        ],
        tools=(PATCH,),
    ),
    RenderCase(
        "a compaction summary",
        [
            _user("Go on."),
            {"type": COMPACTION_SUMMARY, "id": "cmp_1", "summary": "We fixed the build."},
            _user("Next?"),
        ],
    ),
]


@dataclass(frozen=True)
class RenderRequest:
    """One case as we render it and as a Chat Completions client sends it to llama-server."""

    messages: list[ChatMessage]
    options: dict[str, Any]
    body: dict[str, Any]


def render_request(case: RenderCase, tokenizer: ChatTokenizer) -> RenderRequest:
    native = tokenizer.supports_tools and bool(case.tools)
    system, messages = build_context(
        instructions=case.instructions,
        history=(),
        new_items=case.items,
        functions=[] if native else case.tools,
        reasoning_tags=tokenizer.reasoning_tags,
        structured=tokenizer.structured,
    )
    variables = reasoning_variables(case.effort)
    options: dict[str, Any] = dict(variables)
    tools = [template_tool(function) for function in case.tools]
    if native:
        options["tools"] = tools
    # What a Chat Completions client sends llama-server for the same conversation: structured messages, the tools.
    client_system, client_messages = build_context(
        instructions=case.instructions, history=(), new_items=case.items, structured=True
    )
    body: dict[str, Any] = {
        "messages": [
            message.as_template_dict() for message in ([client_system] if client_system else []) + client_messages
        ],
        # llama-server's own default turns thinking on only where its parser finds a reasoning format: ours is on.
        "chat_template_kwargs": {"enable_thinking": True, **variables},
    }
    if tools:
        body["tools"] = tools
    return RenderRequest([system, *messages] if system else messages, options, body)
