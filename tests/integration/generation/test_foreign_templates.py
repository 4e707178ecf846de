"""The shipped model's weights under four real templates of other families, set in a models file (`chat_template`):
gpt-oss, Qwen3, Llama 3.1 and Mistral Small 3.2. A forced call, then a chained turn with the call's output: no
500 anywhere, and the chained prompt renders the call as the template wants it (in `tool_calls`, the output as a
`tool` message): its token count is llama-server's for the same structured messages and template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from app.config import Settings
from app.generation.chat.template import short_call_id
from app.testing.databases import sqlite_url
from app.testing.llama_cpp.server import llama_cpp_source, llama_server, llama_server_binary
from app.testing.servers import SdkClients, ServerProcess

pytestmark = pytest.mark.integration

FAMILIES = {
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "llama-3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral-small-3.2": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def template(family: str) -> Path:
    return llama_cpp_source() / "models" / "templates" / FAMILIES[family]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    directory = tmp_path_factory.mktemp("foreign-templates")
    shipped = Settings(_env_file=None).resolved_model_path
    models = "".join(
        f'[[models]]\nid = "{family}"\npath = "{shipped}"\nn_ctx = 2048\n'
        f"chat_template = {json.dumps(template(family).read_text(), ensure_ascii=False)}\n\n"
        for family in FAMILIES
    )
    (directory / "models.toml").write_text(models)
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_MODELS_FILE": str(directory / "models.toml"),
        "RESPONSES_MAX_LOADED_MODELS": str(len(FAMILIES)),  # each loaded once
    }
    server = ServerProcess(env, directory / "server.log").start()
    clients = SdkClients()
    try:
        yield clients(server.base_url)
    finally:
        clients.close()
        server.stop()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_chained_turn_renders_the_call_as_the_template_wants(
    client: openai.OpenAI, family: str, tmp_path: Path
) -> None:
    question = "What is the weather in Paris?"
    first = client.responses.create(
        model=family,
        input=question,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        temperature=0,
        max_output_tokens=64,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1, first.output
    call = calls[0]
    chained = {
        "model": family,
        "previous_response_id": first.id,
        "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}],
        "tools": [WEATHER],
    }
    counted = client.responses.input_tokens.count(**chained).input_tokens  # type: ignore[arg-type]
    second = client.responses.create(**chained, temperature=0, max_output_tokens=16)  # type: ignore[arg-type]
    assert second.status in ("completed", "incomplete") and second.usage is not None
    assert second.usage.input_tokens == counted
    # The same conversation as a Chat Completions client sends it to llama-server (call ids shortened where the
    # template demands 9 letters and digits, as ours does: Mistral's).
    call_id = short_call_id(call.call_id) if family == "mistral-small-3.2" else call.call_id
    function = {"name": call.name, "arguments": call.arguments}
    body = {
        "messages": [
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": function, "id": call_id}],
            },
            {"role": "tool", "content": "18 C, sunny", "tool_call_id": call_id, "name": call.name},
        ],
        "tools": [
            {
                "type": "function",
                "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
            }
        ],
        "chat_template_kwargs": {"enable_thinking": True},
    }
    model = Settings(_env_file=None).resolved_model_path
    with llama_server(llama_server_binary(), model, template(family), tmp_path) as peer:
        assert not isinstance(peer, str), peer
        status, prompt = peer.apply_template(body)
        assert status == 200, prompt
        assert counted == len(peer.tokenize(prompt))
