# ruff: noqa: RUF001 (DeepSeek's control tokens are spelt with fullwidth vertical bars)
"""Each model family's output, in its own syntax, through the real server path (LocalRunner, execution, relay):
a scripted engine writes it a token at a time (app/testing/scripted.py), and the Response holds its reasoning,
its text and its calls as the SDK's items, streamed, returned whole, in the background, stored or not; cut at
every point, the stream stays well formed. The outputs are written from each family's documented format."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.events.assembler import ResponseAssembler
from app.generation.dialects.families import DIALECTS, dialect_named
from app.generation.local_runner import LocalRunner
from app.generation.types import Finish, PromptRenderer
from app.schemas.responses import ResponseObject
from app.testing.fakes import FakeRenderer
from app.testing.mcp_server import ToolServer, tool_server
from app.testing.scripted import ScriptedEngine, tokens_of
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
REASONING = "Weather lookup."
TEXT = "Checking."
ARGUMENTS = {"city": "Paris"}
#: Each family's output: reasoning (where it has any), text, then a call of get_weather for Paris; and whether
#: its prompt opened the reasoning (the template's generation prompt does).
OUTPUTS: dict[str, tuple[str, bool]] = {
    "hermes": (
        '<think>Weather lookup.</think>Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>",
        False,
    ),
    "qwen3_coder": (
        "Weather lookup.\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call>",
        True,
    ),
    "harmony": (
        "<|channel|>analysis<|message|>Weather lookup.<|end|><|start|>assistant<|channel|>commentary<|message|>"
        "Checking.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris"}',
        False,
    ),
    "llama3": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', False),
    "mistral": ('[THINK]Weather lookup.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', False),
    "mistral_json": ('Checking.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]', False),
    "deepseek_r1": (
        "Weather lookup.</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        True,
    ),
    "deepseek_v3": (
        "Weather lookup.</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        True,
    ),
    "deepseek_v32": (
        'Weather lookup.</think>Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls>",
        True,
    ),
    "deepseek_v4": (
        'Weather lookup.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜tool_calls>",
        True,
    ),
    "gemma4": (
        '<|channel>thought\nWeather lookup.<channel|>Checking.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}'
        "<tool_call|>",
        False,
    ),
    "glm": (
        "<think>Weather lookup.</think>\nChecking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n</tool_call>",
        False,
    ),
    "kimi": (
        "<think>Weather lookup.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
        False,
    ),
    "granite": (
        '<think>Weather lookup.</think><response>Checking.</response><|tool_call|>[{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}]',
        False,
    ),
    "minimax": (
        '<think>Weather lookup.</think>Checking.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">'
        "Paris</parameter>\n</invoke>\n</minimax:tool_call>",
        False,
    ),
    "command_r": (
        "<|START_THINKING|>Weather lookup.<|END_THINKING|><|START_RESPONSE|>Checking.<|END_RESPONSE|><|START_ACTION|>"
        '[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}\n]<|END_ACTION|>',
        False,
    ),
    "functionary": ('Checking.<function=get_weather>{"city": "Paris"}</function>', False),
}


def test_every_family_has_an_example() -> None:
    assert set(OUTPUTS) == {dialect.name for dialect in DIALECTS}


@pytest.fixture
def engine() -> Iterator[ScriptedEngine]:
    scripted = ScriptedEngine()
    yield scripted
    scripted.close()


class ScriptedRunner(LocalRunner):
    """The real runner on the scripted engine; its tool rounds rendered by the test's renderer (the app's)."""

    def __init__(self, engine: ScriptedEngine, renderer: FakeRenderer) -> None:
        super().__init__(engine)  # type: ignore[arg-type]
        self.prompt_renderer = renderer

    async def renderer(self, model: str) -> PromptRenderer:
        return self.prompt_renderer  # type: ignore[return-value]


@pytest.fixture
def runner(engine: ScriptedEngine, renderer: FakeRenderer) -> LocalRunner:
    return ScriptedRunner(engine, renderer)


def speak(renderer: FakeRenderer, engine: ScriptedEngine, family: str, *outputs: str) -> str:
    """The served model becomes one of `family`, writing `outputs` (its example when none)."""
    example, opened = OUTPUTS[family]
    dialect = dialect_named(family)
    renderer.dialect = family
    renderer.reasoning_tags = dialect.reasoning
    renderer.reasoning_opened = opened
    engine.outputs = list(outputs or [example])
    return example


def expected_types(family: str) -> list[str]:
    reasoning = ["reasoning"] if dialect_named(family).reasoning or family == "harmony" else []
    message = [] if family in ("llama3", "command_r") and TEXT not in OUTPUTS[family][0] else ["message"]
    if family == "command_r":
        message = ["message"]
    return [*reasoning, *message, "function_call"]


def check_output(family: str, response: dict[str, Any]) -> None:
    assert response["status"] == "completed", response
    output = response["output"]
    assert [item["type"] for item in output] == expected_types(family), output
    for item in output:
        if item["type"] == "reasoning":
            assert item["content"] == [{"type": "reasoning_text", "text": REASONING}]
        elif item["type"] == "message":
            assert item["content"][0]["text"].strip() == TEXT  # whitespace before a call is the model's
            assert item.get("phase") == ("commentary" if family == "harmony" else None)
        else:
            assert item["name"] == "get_weather" and item["status"] == "completed"
            assert json.loads(item["arguments"]) == ARGUMENTS


FAMILIES = list(OUTPUTS)


@pytest.mark.parametrize("family", FAMILIES)
async def test_a_family_s_output_streams_as_the_sdk_s_items(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine, family: str
) -> None:
    speak(renderer, engine, family)
    reply = await client.post("/v1/responses", json={"input": "Weather?", "tools": [WEATHER], "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    check_output(family, final)
    kinds = [event["type"] for event in events]
    assert "response.function_call_arguments.delta" in kinds, "the arguments stream"
    deltas = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert deltas.strip() == (TEXT if TEXT in OUTPUTS[family][0] else ""), "no markup said as text"
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored["output"] == final["output"]


@pytest.mark.parametrize("family", ["harmony", "qwen3_coder", "mistral", "llama3"])
@pytest.mark.parametrize("mode", ["json", "background", "store_false"])
async def test_a_family_s_output_whole_in_the_background_and_unstored(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine, family: str, mode: str
) -> None:
    speak(renderer, engine, family)
    body: dict[str, Any] = {"input": "Weather?", "tools": [WEATHER]}
    if mode == "background":
        body["background"] = True
    if mode == "store_false":
        body["store"] = False
    response = (await client.post("/v1/responses", json=body)).json()
    for _ in range(200):
        if response["status"] not in ("queued", "in_progress"):
            break
        await asyncio.sleep(0.02)
        response = (await client.get(f"/v1/responses/{response['id']}")).json()
    check_output(family, response)
    found = await client.get(f"/v1/responses/{response['id']}")
    assert found.status_code == (404 if mode == "store_false" else 200)


PARALLEL = {
    "harmony": "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
    '{"city": "Paris"}<|call|>'
    '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}',
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>'
    '{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>',
    "command_r": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},'
    ' {"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Rome"}}]<|END_ACTION|>',
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
    "mistral_json": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
    '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
    "deepseek_r1": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    '{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
    '{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"city": "Paris"}<｜tool▁call▁end｜>'
    '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Rome"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v32": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
    'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
    "</｜DSML｜function_calls>",
    "deepseek_v4": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
    'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    "gemma4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
    '<|tool_call>call:get_weather{city:<|"|>Rome<|"|>}<tool_call|>',
    "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>",
    "granite": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
    '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
    "minimax": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
    '<invoke name="get_weather">\n<parameter name="city">Rome</parameter>\n</invoke>\n</minimax:tool_call>',
}


def test_every_family_that_calls_in_parallel_has_a_parallel_example() -> None:
    assert set(PARALLEL) == {dialect.name for dialect in DIALECTS if dialect.parallel}


@pytest.mark.parametrize("family", list(PARALLEL))
async def test_parallel_calls_are_items_each_and_one_when_not_parallel(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine, family: str
) -> None:
    speak(renderer, engine, family, PARALLEL[family])
    body = {"input": "Weather?", "tools": [WEATHER], "stream": True}
    final = assert_well_formed_stream(parse_sse((await client.post("/v1/responses", json=body)).text))
    cities = [json.loads(item["arguments"])["city"] for item in final["output"] if item["type"] == "function_call"]
    assert cities == ["Paris", "Rome"]
    speak(renderer, engine, family, PARALLEL[family])
    single = await client.post("/v1/responses", json={**body, "parallel_tool_calls": False})
    final = assert_well_formed_stream(parse_sse(single.text))
    assert [item["type"] for item in final["output"]] == ["function_call"]


SHELL = {"type": "shell", "environment": {"type": "local"}}
CUSTOM = {"type": "custom", "name": "run_sql"}


async def test_client_tool_types_and_custom_tools_in_a_family_s_syntax(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine
) -> None:
    shell = '<|start|>assistant to=functions.shell<|channel|>commentary json<|message|>{"commands": ["ls -la"]}'
    speak(renderer, engine, "harmony", shell)
    body = (await client.post("/v1/responses", json={"input": "List.", "tools": [SHELL]})).json()
    assert [item["type"] for item in body["output"]] == ["shell_call"]
    assert body["output"][0]["action"]["commands"] == ["ls -la"]
    custom = "<tool_call>\n<function=run_sql>\n<parameter=input>\nSELECT 1\n</parameter>\n</function>\n</tool_call>"
    speak(renderer, engine, "qwen3_coder", custom)
    reply = await client.post("/v1/responses", json={"input": "Query.", "tools": [CUSTOM], "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    (call,) = final["output"]
    assert call["type"] == "custom_tool_call" and call["input"] == "SELECT 1"


async def test_a_forced_call_is_held_by_the_family_s_grammar(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine
) -> None:
    for family, start in [
        ("harmony", 'root ::= (" to=functions.get_weather<|channel|>commentary json<|message|>"'),
        ("mistral", 'root ::= ("[TOOL_CALLS]get_weather[ARGS]"'),
        ("qwen3_coder", 'root ::= ("<tool_call>\\x0A<function=get_weather>\\x0A" "<parameter=city>\\x0A" xml-text'),
        ("llama3", 'root ::= ("{\\"name\\": \\"get_weather\\", \\"parameters\\": "'),
    ]:
        speak(renderer, engine, family)
        reply = await client.post("/v1/responses", json={"input": "x", "tools": [WEATHER], "tool_choice": "required"})
        assert reply.status_code == 200, reply.text
        assert renderer.grammars[-1].startswith(start), (family, renderer.grammars[-1][:200])


@pytest.fixture
async def calculator() -> Any:
    async with tool_server() as running:
        yield running


@pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*")
async def test_an_mcp_tool_called_in_a_family_s_syntax_is_made_by_the_tool_loop(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine, calculator: ToolServer
) -> None:
    call = (
        "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant to=functions.add<|channel|>commentary json"
        '<|message|>{"a": 2, "b": 3}'
    )
    speak(renderer, engine, "harmony", call, "<|channel|>final<|message|>The sum is 5.")
    tool = {"type": "mcp", "server_label": "calc", "server_url": calculator.url, "require_approval": "never"}
    reply = await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [tool], "stream": True})
    assert reply.status_code == 200, reply.text
    final = assert_well_formed_stream(parse_sse(reply.text))
    types = [item["type"] for item in final["output"]]
    assert types == ["mcp_list_tools", "reasoning", "mcp_call", "message"], (final["status"], final["error"])
    assert final["output"][2]["output"] == "5" and final["output"][3]["content"][0]["text"] == "The sum is 5."
    assert final["output"][3]["phase"] == "final_answer"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_s_output_cut_anywhere_ends_in_a_well_formed_stream(family: str) -> None:
    """The assembler fed the example a token at a time and cut after each: never an exception, never call markup
    as text, a well-formed stream whose last call, if any, is the one the cut fell in."""
    output, opened = OUTPUTS[family]
    dialect = dialect_named(family)
    pieces = list(tokens_of(output, dialect))
    for cut in range(len(pieces) + 1):
        response = ResponseObject(id="resp_1", created_at=0, status="in_progress", model="m")
        assembler = ResponseAssembler(
            response,
            {"get_weather": None},
            dialect.reasoning,
            dialect=family,
            reasoning_open=opened,
            parameter_types={"get_weather": {"city": "string", "days": "integer"}},
        )
        events = assembler.start()
        for piece in pieces[:cut]:
            events += assembler.text(piece)
        events += assembler.finish(Finish("length", 1, 0, cut), completed_at=2)
        final = assert_well_formed_stream([event.model_dump(mode="json") for event in events])
        said = "".join(
            part["text"] for item in final["output"] if item["type"] == "message" for part in item["content"]
        )
        assert TEXT.startswith(said.strip()), (cut, said)


async def test_reasoning_summary_is_empty_where_the_model_writes_none(
    client: httpx.AsyncClient, renderer: FakeRenderer, engine: ScriptedEngine
) -> None:
    """`reasoning.summary` asks for a summary; these models write their reasoning, never a summary of it: the
    reasoning item's `summary` is empty and its `content` holds the reasoning, whatever the request asked."""
    speak(renderer, engine, "harmony")
    body = {"input": "Weather?", "tools": [WEATHER], "reasoning": {"effort": "high", "summary": "detailed"}}
    response = (await client.post("/v1/responses", json=body)).json()
    reasoning = response["output"][0]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": REASONING}]
    assert response["reasoning"] == {"effort": "high", "summary": "detailed"}
