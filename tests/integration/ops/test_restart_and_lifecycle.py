"""Durability and start-up: a SIGKILLed server comes back with everything stored; start-up errors are clear."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus

from app.testing.databases import fresh_postgres_database
from app.testing.servers import SdkClients, ServerProcess, run_cli
from tests.protocol import socket_exchange

pytestmark = pytest.mark.integration


def test_sigkill_then_restart_keeps_responses_and_chains(database_url: str, log_path: Path, sdk: SdkClients) -> None:
    server = ServerProcess({"RESPONSES_DATABASE_URL": database_url}, log_path).start()
    try:
        client = sdk(server.base_url)
        model = client.models.list().data[0].id
        first = client.responses.create(model=model, input="Remember the number 7.", max_output_tokens=16)
        second = client.responses.create(
            model=model, input="Which number?", previous_response_id=first.id, max_output_tokens=16
        )
        tool = {
            "type": "function",
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        }
        # Greedy and capped: at the default temperature the small model can write an argument string until
        # the context is full, which on a loaded machine ran past the client's timeout.
        tool_turn = client.responses.create(
            model=model,
            input="Look up 'x'.",
            tools=[tool],
            tool_choice="required",
            temperature=0,
            max_output_tokens=200,
        )
        call = next(item for item in tool_turn.output if item.type == "function_call")
        with httpx.Client(timeout=60) as http:
            killed_mid_generation = _start_a_long_stream(server, model, http)
            server.kill()
        server.start()
        orphan = client.responses.retrieve(killed_mid_generation)
        assert orphan.status == "failed" and orphan.error is not None and orphan.error.code == "server_error"
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
        assert client.responses.retrieve(second.id).model_dump() == second.model_dump()
        assert [item.id for item in client.responses.input_items.list(second.id)]
        third = client.responses.create(
            model=model, input="Say it again.", previous_response_id=second.id, max_output_tokens=16
        )
        assert third.status in ("completed", "incomplete") and third.previous_response_id == second.id
        assert third.usage is not None and second.usage is not None
        assert third.usage.input_tokens > second.usage.input_tokens
        # A tool turn stored before the crash is answered after it.
        answered = client.responses.create(
            model=model,
            previous_response_id=tool_turn.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
            max_output_tokens=16,
        )
        assert answered.status in ("completed", "incomplete")
    finally:
        server.stop()


def _start_a_long_stream(server: ServerProcess, model: str, http: httpx.Client) -> str:
    """Start a long streamed generation on `http`; return its id once the first token is out (left open)."""
    body = {"model": model, "input": "Write a long story.", "stream": True, "max_output_tokens": 4000}
    stream = http.send(http.build_request("POST", f"{server.base_url}/v1/responses", json=body), stream=True)
    response_id = None
    for line in stream.iter_lines():
        if response_id is None and line.startswith("data: "):
            response_id = json.loads(line[6:])["response"]["id"]
        if "response.output_text.delta" in line:
            break
    assert response_id is not None
    return response_id


def test_api_keys_make_tenants(database_url: str, log_path: Path, sdk: SdkClients) -> None:
    server = ServerProcess({"RESPONSES_DATABASE_URL": database_url, "RESPONSES_API_KEYS": "k1,k2"}, log_path).start()
    try:
        one, two, nobody = sdk(server.base_url, "k1"), sdk(server.base_url, "k2"), sdk(server.base_url, "nope")
        model = one.models.list().data[0].id
        mine = one.responses.create(model=model, input="hello", max_output_tokens=16)
        with pytest.raises(openai.AuthenticationError):
            nobody.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            two.responses.retrieve(mine.id)
        with pytest.raises(openai.BadRequestError):
            two.responses.create(model=model, input="x", previous_response_id=mine.id)
        assert one.responses.retrieve(mine.id).id == mine.id
        with pytest.raises(openai.BadRequestError) as counted:
            two.responses.input_tokens.count(model=model, input="x", previous_response_id=mine.id)
        assert counted.value.body["code"] == "previous_response_not_found"
        # WebSocket mode takes the same keys: the upgrade is refused with the same 401.
        with pytest.raises(InvalidStatus) as refused, nobody.responses.connect():
            pass
        assert refused.value.response.status_code == 401
        with one.responses.connect() as connection:
            events = socket_exchange(
                connection, model=model, input="again", previous_response_id=mine.id, max_output_tokens=16
            )
            assert events[-1]["type"] in ("response.completed", "response.incomplete")
        with two.responses.connect() as connection:
            events = socket_exchange(connection, model=model, input="x", previous_response_id=mine.id)
            assert events[0]["error"]["code"] == "previous_response_not_found"
    finally:
        server.stop()


def test_serve_refuses_an_unmigrated_postgres(tmp_path: Path) -> None:
    with fresh_postgres_database() as url:
        result = run_cli(["serve", "--port", "1"], {"RESPONSES_DATABASE_URL": url})
    assert result.returncode != 0
    assert "llama-responses migrate" in result.stderr


def test_serve_without_a_model_says_how_to_set_one(tmp_path: Path) -> None:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", "RESPONSES_MODEL_PATH": "/nope.gguf"}
    result = run_cli(["serve", "--port", "1"], env)
    assert result.returncode != 0
    assert "RESPONSES_MODEL_PATH" in result.stderr and len(result.stderr.strip().splitlines()) == 1
