"""`response.steer` on a WebSocket connection, with the fake model: accepted at once, applied at a safe boundary
(the running response ends `incomplete`, reason `steered`), committed by an automatic successor chained on it with
the settings of its create; pending while the response waits for client tool output; failed, input returned, when
it cannot be committed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.protocol import SOCKET_EVENT, assert_well_formed_stream
from tests.unit.sessions.fake_app import TERMINAL, Setup

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def receive(socket: Any, *, valid: bool = True) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(socket.receive_text())
    if valid:  # every event, the steering ones included, is one the SDK reads (but input returned as it came)
        SOCKET_EVENT.validate_python(event)
    return event


def until(socket: Any, kind: str) -> list[dict[str, Any]]:
    events = [receive(socket)]
    while events[-1]["type"] != kind:
        events.append(receive(socket))
    return events


def until_terminal(socket: Any) -> list[dict[str, Any]]:
    events = [receive(socket)]
    while events[-1]["type"] not in TERMINAL and events[-1]["type"] != "error":
        events.append(receive(socket))
    return events


def steer(socket: Any, response_id: str, given: object = "talk about ships instead", **extra: object) -> None:
    socket.send_text(
        json.dumps({"type": "response.steer", "previous_response_id": response_id, "input": given, **extra})
    )


def slow(setup: Setup, words: int = 80) -> None:
    setup.runner.delay_s = 0.03
    setup.runner.reply = [f"w{index}" for index in range(words)]


@pytest.mark.parametrize("store", [True, False])
def test_a_steer_stops_the_response_steered_and_a_successor_carries_the_input_with_the_same_settings(
    setup: Setup, store: bool
) -> None:
    slow(setup)
    create = {
        "type": "response.create",
        "input": "tell me a story",
        "instructions": "be brief",
        "temperature": 0.3,
        "max_output_tokens": 200,
        "metadata": {"run": "1"},
        "store": store,
        "stream_id": "main",
    }
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps(create))
        first = until(socket, "response.output_text.delta")
        running = first[0]["response"]["id"]
        steer(socket, running)
        seen = until(socket, "response.steer.accepted")
        accepted = seen[-1]
        assert accepted["steer"]["previous_response_id"] == running and accepted["steer"]["id"].startswith("steer_")
        assert accepted["stream_id"] == "main"
        seen += until(socket, "response.incomplete")
        steered = [*first, *seen[:-1], seen[-1]]
        own = [event for event in steered if not event["type"].startswith("response.steer")]
        final = assert_well_formed_stream(own, union=SOCKET_EVENT)
        assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "steered"}
        text = final["output"][0]["content"][0]["text"]
        assert 0 < len(text.split()) < 80, "stopped between tokens, before the end"
        setup.runner.delay_s = 0
        successor_events = until_terminal(socket)
        successor = assert_well_formed_stream(successor_events, union=SOCKET_EVENT)
        assert successor["status"] == "completed" and successor["previous_response_id"] == running
        assert {event["stream_id"] for event in successor_events} == {"main"}
        for name in ("instructions", "temperature", "max_output_tokens", "metadata", "store"):
            assert successor[name] == final[name] == (create[name] if name != "store" else store), name
        rendered = [message.content for message in setup.renderer.rendered[-1]]
        assert rendered[-1] == "talk about ships instead"
        assert "tell me a story" in rendered and text in rendered, "chained on the steered response"
        # The connection goes on as before: a steer for a response that ended is refused, its input returned.
        steer(socket, running, "too late")
        late = receive(socket)
        assert late["type"] == "response.steer.failed" and late["error"]["code"] == "response_already_completed"
        assert late["steer"] == {"previous_response_id": running, "input": "too late"}


def test_a_response_that_completes_first_is_followed_by_its_successor(setup: Setup) -> None:
    setup.runner.delay_s = 0.03
    setup.runner.reply = ["a", "{", '"k":', "1}"]
    schema = {"type": "json_schema", "name": "thing", "schema": {"type": "object"}}
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "json", "text": {"format": schema}}))
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        steer(socket, running, [{"role": "user", "content": [{"type": "input_text", "text": "and more"}]}])
        until(socket, "response.steer.accepted")
        # A structured output is never cut: it completes, then the successor commits the steer.
        done = until_terminal(socket)
        assert done[-1]["type"] == "response.completed"
        successor = until_terminal(socket)
        assert successor[0]["type"] == "response.created"
        assert successor[-1]["response"]["previous_response_id"] == running
        assert successor[-1]["response"]["text"]["format"]["type"] == "json_schema"


def test_a_call_is_never_cut_and_a_steer_waits_for_the_client_tool_output(setup: Setup) -> None:
    setup.runner.delay_s = 0.03
    setup.runner.separator = ""
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris, the capital of France"}}</tool_call>'
    # The text and the call's opening tag come in one piece: the text's delta is sent when the call has begun.
    setup.runner.reply = ["Ok<tool_call>", *call.removeprefix("<tool_call>")]
    with setup.client.websocket_connect("/v1/responses") as socket:
        create = {"type": "response.create", "input": "weather?", "tools": [WEATHER], "stream_id": "tools"}
        socket.send_text(json.dumps(create))
        # A steer that comes while the call's arguments are written does not cut them.
        events = until(socket, "response.output_text.delta")
        running = events[0]["response"]["id"]
        steer(socket, running, "in Celsius please")
        accepted = until(socket, "response.steer.accepted")[-1]
        completed = until(socket, "response.completed")[-1]["response"]
        assert completed["status"] == "completed"
        function_call = completed["output"][-1]
        assert function_call["type"] == "function_call" and "Paris, the capital" in function_call["arguments"]
        pending = receive(socket)
        assert pending["type"] == "response.steer.pending" and pending["reason"] == "waiting_for_required_input"
        assert pending["steer"] == accepted["steer"] and pending["stream_id"] == "tools"
        stub = {"type": "function_call_output", "call_id": function_call["call_id"], "name": "get_weather"}
        assert pending["required_input"] == [stub]
        # The client's continuation brings the output; the steering input comes first in it.
        setup.runner.delay_s, setup.runner.reply = 0, ["sunny"]
        output = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "18C"}
        continuation = {**create, "previous_response_id": running, "input": [output], "temperature": 0.5}
        socket.send_text(json.dumps(continuation))
        answered = assert_well_formed_stream(until_terminal(socket), union=SOCKET_EVENT)
        assert answered["previous_response_id"] == running and answered["temperature"] == 0.5, "its own settings"
        rendered = [message.content for message in setup.renderer.rendered[-1]]
        assert rendered[-2] == "in Celsius please" and "18C" in rendered[-1]


def test_steers_that_cannot_be_taken_fail_at_once_with_their_input(setup: Setup) -> None:
    slow(setup)
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "go", "stream_id": "a"}))
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        refused: list[tuple[object, dict[str, object], str]] = [
            ("x", {"stream_id": "a"}, "invalid_input"),
            ([{"role": "assistant", "content": "no"}], {}, "invalid_input"),
            ([{"role": "user", "content": "hi", "name": "me"}], {}, "invalid_input"),
            ("", {}, "invalid_input"),
        ]
        for given, extra, _ in refused:
            steer(socket, running, given, **extra)
        steer(socket, "resp_elsewhere", "x")
        # The invalid input is returned as it came, so that the client can correct it: not the SDK's shape.
        answers = [receive(socket, valid=False) for _ in range(len(refused) + 1)]
        for answer, (given, _, code) in zip(answers, [*refused, ("x", {}, "response_not_found")], strict=True):
            assert answer["type"] == "response.steer.failed" and answer["error"]["code"] == code, answer
            assert answer["steer"]["input"] == given and "id" not in answer["steer"]
        # Nothing of it touched the running response.
        assert until_terminal(socket)[-1]["type"] == "response.completed"
        # No previous_response_id: an error naming the event, not a steering failure.
        socket.send_text(json.dumps({"type": "response.steer", "input": "x"}))
        error = receive(socket)
        assert error["type"] == "error" and error["error"]["param"] == "previous_response_id"


def test_a_conversations_response_cannot_be_steered(setup: Setup) -> None:
    slow(setup)
    conversation = setup.client.post("/v1/conversations", json={}).json()["id"]
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "go", "conversation": conversation}))
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        steer(socket, running)
        failed = receive(socket)
        assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "steering_not_supported"
        assert until_terminal(socket)[-1]["type"] == "response.completed"


def test_a_steer_for_a_response_that_fails_is_returned(setup: Setup) -> None:
    slow(setup)
    setup.runner.fail_after = 20
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(
            json.dumps({"type": "response.create", "input": "go", "text": {"format": {"type": "json_object"}}})
        )
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        steer(socket, running, "x")
        accepted = until(socket, "response.steer.accepted")[-1]
        assert until(socket, "response.failed")[-1]["response"]["id"] == running
        failed = receive(socket)
        assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "response_not_active"
        assert failed["steer"] == {**accepted["steer"], "input": "x"}


@pytest.mark.settings(lease_s=1)
def test_a_steer_whose_signal_is_lost_is_read_from_the_store(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored, then signalled, as a cancel is: the job's next lease renewal reads the stored steer."""

    async def lost(response_id: str) -> None:
        return None

    monkeypatch.setattr(setup.client.app.state.runtime.queue, "steer", lost)  # type: ignore[attr-defined]
    slow(setup, words=200)
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "go"}))
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        steer(socket, running)
        assert until(socket, "response.steer.accepted")[-1]["steer"]["previous_response_id"] == running
        final = until_terminal(socket)[-1]["response"]
        assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "steered"}
        assert len(final["output"][0]["content"][0]["text"].split()) < 200
        successor = until_terminal(socket)[-1]["response"]
        assert successor["previous_response_id"] == running and successor["status"] == "completed"


@pytest.mark.settings(lease_s=1, reconcile_interval_s=0.05)
def test_a_steer_for_a_response_whose_worker_died_is_returned(setup: Setup) -> None:
    slow(setup)
    setup.runner.crash_after = 20  # its lease expires, and the reconciler ends it failed
    with setup.client.websocket_connect("/v1/responses") as socket:
        json_format = {"format": {"type": "json_object"}}  # never cut: the steer waits for its end
        socket.send_text(json.dumps({"type": "response.create", "input": "go", "text": json_format}))
        running = until(socket, "response.output_text.delta")[0]["response"]["id"]
        steer(socket, running, "x")
        accepted = until(socket, "response.steer.accepted")[-1]
        ended = until(socket, "response.failed")[-1]  # after an `error` event that says why
        assert ended["response"]["id"] == running
        failed = receive(socket)
        assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "response_not_active"
        assert failed["steer"] == {**accepted["steer"], "input": "x"}
