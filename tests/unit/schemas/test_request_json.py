"""Request JSON is decoded in one place (app/schemas/parsing.py): whatever the text, every JSON route and the
WebSocket answer a 400 `invalid_json` for a body they cannot decode, never a 500."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from app.config import Settings
from app.errors import InvalidRequest
from app.main import create_app
from app.schemas.parsing import parse_json_object
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.protocol import assert_error

#: Past the interpreter's limit on the digits of an int decoded from text (4300): json.loads raises ValueError.
HUGE_INTEGER = "9" * 5000
HUGE_BODY = '{"input": "x", "n": ' + HUGE_INTEGER + "}"


@pytest.mark.parametrize(
    "body",
    [
        HUGE_BODY,
        '{"input": [{"role": "user", "content": "x", "n": -' + HUGE_INTEGER + "}]}",
        '{"metadata": {"k": "v"}, "deep": [[[' + HUGE_INTEGER + "]]]}",
    ],
)
def test_an_integer_past_the_digit_limit_is_invalid_json(body: str) -> None:
    settings = Settings(_env_file=None)
    for raw in (body, body.encode()):
        with pytest.raises(InvalidRequest) as refused:
            parse_json_object(raw, settings)
        assert refused.value.code == "invalid_json" and refused.value.status_code == 400


def test_an_integer_within_the_limit_is_kept() -> None:
    assert parse_json_object('{"n": ' + "9" * 4000 + "}", Settings(_env_file=None))["n"] == int("9" * 4000)


async def test_every_json_route_answers_400_invalid_json(client: httpx.AsyncClient) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    routes = [
        "/v1/responses",
        "/v1/responses/input_tokens",
        "/v1/responses/compact",
        "/v1/conversations",
        f"/v1/conversations/{conversation}",
        f"/v1/conversations/{conversation}/items",
    ]
    for route in routes:
        reply = await client.post(route, content=HUGE_BODY, headers={"content-type": "application/json"})
        error = assert_error(reply, 400, param=None, code="invalid_json")
        assert error["type"] == "invalid_request_error", route
    assert (await client.post("/v1/responses", json={"input": "still serving"})).status_code == 200


def test_a_websocket_message_answers_an_invalid_json_error_event(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ws.db'}", model_id="fake-model", _env_file=None)
    with (
        TestClient(create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))) as client,
        client.websocket_connect("/v1/responses") as socket,
    ):
        payload = '{"type": "response.create", "input": "x", "n": ' + HUGE_INTEGER + "}"
        for as_bytes in (False, True):
            if as_bytes:
                socket.send_bytes(payload.encode())
            else:
                socket.send_text(payload)
            error = json.loads(socket.receive_text())
            assert error["type"] == "error" and error["status"] == 400, error
            assert error["error"]["code"] == "invalid_json" and error["error"]["type"] == "invalid_request_error"
        socket.send_text(json.dumps({"type": "response.create", "input": "still here"}))
        while (event := json.loads(socket.receive_text()))["type"] != "response.completed":
            assert event["type"] != "error", event
