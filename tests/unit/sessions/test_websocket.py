"""WebSocket mode in-process with the fake model: the same events as a stream, errors as events on an open
connection, one response at a time, and the connection's memory of its last unstored response."""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import DBAPIError
from starlette.testclient import WebSocketDenialResponse

from app.observability.metrics import REGISTRY
from app.responses import repository
from tests.protocol import SOCKET_EVENT, assert_well_formed_stream
from tests.unit.sessions.fake_app import TERMINAL, Setup


def well_formed(events: list[dict]) -> dict:
    return assert_well_formed_stream(events, union=SOCKET_EVENT)


def until_terminal(socket: Any) -> list[dict]:
    events = []
    while True:
        event = json.loads(socket.receive_text())
        events.append(event)
        if event["type"] in TERMINAL or (event["type"] == "error" and "sequence_number" not in event):
            return events


def create(socket: Any, **fields: object) -> list[dict]:
    socket.send_text(json.dumps({"type": "response.create", **fields}))
    return until_terminal(socket)


def test_a_response_create_streams_the_same_events_as_sse(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        events = create(socket, input="hello", model="fake-model")
        final = well_formed(events)
        assert final["status"] == "completed" and final["output"][0]["content"][0]["text"].startswith("the quick")
        # The next message on the same connection is answered the same way.
        again = create(socket, input="again", stream_id="lane-1")
        assert well_formed(again)["id"] != final["id"]
        assert {event["stream_id"] for event in again} == {"lane-1"}
    stored = setup.client.get(f"/v1/responses/{final['id']}").json()
    assert stored == final


def test_bad_messages_are_error_events_and_the_connection_stays_open(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text("this is not json")
        error = json.loads(socket.receive_text())
        assert error["type"] == "error" and error["status"] == 400 and error["error"]["code"] == "invalid_json"
        cases: list[tuple[dict[str, Any], str]] = [
            ({"type": "response.steer", "input": "x"}, "previous_response_id"),
            ({"input": "x"}, "type"),
            ({"type": "response.create", "input": "x", "background": True}, "background"),
            ({"type": "response.create", "input": "x", "temperature": 9}, "temperature"),
            ({"type": "response.create", "input": "x", "generate": "no"}, "generate"),
            ({"type": "response.create", "input": "x", "previous_response_id": "resp_gone"}, "previous_response_id"),
        ]
        for message, param in cases:
            socket.send_text(json.dumps({**message, "stream_id": "s"}))
            error = json.loads(socket.receive_text())
            assert error["type"] == "error" and error["error"]["param"] == param, error
            assert set(error["error"]) == {"message", "type", "param", "code"} and error["stream_id"] == "s"
        assert well_formed(create(socket, input="still here"))["status"] == "completed"


@pytest.mark.parametrize("store", [True, False])
def test_generate_false_reads_the_context_and_answers_with_no_output(setup: Setup, store: bool) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        events = create(socket, input="a long system of rules", store=store, generate=False)
        warm = well_formed(events)
        assert [event["type"] for event in events] == ["response.created", "response.in_progress", "response.completed"]
        assert warm["status"] == "completed" and warm["output"] == []
        usage = warm["usage"]
        assert usage["output_tokens"] == 0 and usage["input_tokens"] == usage["total_tokens"] > 0
        job = setup.runner.jobs[-1]
        assert job.sampling.prefill_only and job.prompt_tokens
        # The turn chained on it reads the warm-up's input first, and generates.
        turn = well_formed(create(socket, input="now answer", store=store, previous_response_id=warm["id"]))
        assert [message.content for message in setup.renderer.rendered[-1]] == ["a long system of rules", "now answer"]
        assert turn["output"][0]["content"][0]["text"].startswith("the quick")
        assert not setup.runner.jobs[-1].sampling.prefill_only
    stored = setup.client.get(f"/v1/responses/{warm['id']}")
    assert stored.status_code == (200 if store else 404)
    if store:
        assert stored.json() == warm


def test_a_turn_with_no_new_input_continues_a_warm_up(setup: Setup) -> None:
    # Codex CLI's shape: the warm-up carries the turn's input, the turn itself only what is new (nothing).
    with setup.client.websocket_connect("/v1/responses") as socket:
        warm = well_formed(create(socket, input="say hello", instructions="Be an agent.", store=False, generate=False))
        turn = well_formed(
            create(socket, input=[], instructions="Be an agent.", store=False, previous_response_id=warm["id"])
        )
        assert [message.content for message in setup.renderer.rendered[-1]] == ["Be an agent.", "say hello"]
        assert setup.runner.jobs[-1].prompt_tokens == setup.runner.jobs[-2].prompt_tokens
        assert turn["status"] == "completed" and turn["output"][0]["type"] == "message"


def test_connections_accepted_are_counted(setup: Setup) -> None:
    def accepted() -> float:
        return REGISTRY.get_sample_value("llama_responses_websocket_connections_total") or 0.0

    before = accepted()
    with setup.client.websocket_connect("/v1/responses") as socket:
        create(socket, input="one")
        create(socket, input="two")
    assert accepted() - before == 1, "one connection, whatever runs on it"


def until_event(socket: Any, kind: str) -> list[dict]:
    """What the socket sends up to (and with) the first event of `kind`."""
    events: list[dict] = []
    while not events or events[-1]["type"] != kind:
        events.append(json.loads(socket.receive_text()))
    return events


def slow_reply(setup: Setup, words: int = 60) -> None:
    """A response that runs for about three seconds: long enough to send it events while it runs."""
    setup.runner.delay_s = 0.05
    setup.runner.reply = [f"w{index}" for index in range(words)]


def test_refused_events_are_answered_at_once_while_a_response_runs(setup: Setup) -> None:
    slow_reply(setup)
    refused: list[tuple[str | dict[str, Any], str | None, list[str]]] = [
        ("this is not json", None, ["a message"]),
        (
            {"type": "response.steer", "event_id": "evt_steer", "input": "x"},
            "previous_response_id",
            ["'response.steer'", "event_id 'evt_steer'"],
        ),
        (
            {"type": "response.cancel", "event_id": "evt_cancel", "response_id": "resp_2"},
            "type",
            ["'response.cancel'", "event_id 'evt_cancel'", "response_id 'resp_2'"],
        ),
        (
            {"type": "response.create", "event_id": "evt_hot", "input": "x", "temperature": 9, "stream_id": "lane"},
            "temperature",
            ["'response.create'", "event_id 'evt_hot'"],
        ),
        # A conflict between its own fields is found as it arrives, too.
        (
            {"type": "response.create", "input": "x", "conversation": "conv_1", "previous_response_id": "resp_3"},
            "conversation",
            ["'response.create'", "previous_response_id 'resp_3'"],
        ),
    ]
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "a long story", "stream_id": "main"}))
        seen = until_event(socket, "response.output_text.delta")
        for message, _, _ in refused:
            socket.send_text(message if isinstance(message, str) else json.dumps(message))
        seen += until_event(socket, "response.completed")
        errors = [event for event in seen if event["type"] == "error"]
        stream = [event for event in seen if event["type"] != "error"]
        # Each answered before the running response ended, which went on and ended as if nothing had been sent.
        assert len(errors) == len(refused), [event["type"] for event in seen]
        assert seen[-1]["type"] == "response.completed"
        final = well_formed(stream)
        assert final["output"][0]["content"][0]["text"] == " ".join(setup.runner.reply)
        assert {event["stream_id"] for event in stream} == {"main"}
        for error, (message, param, names) in zip(errors, refused, strict=True):
            SOCKET_EVENT.validate_python(error)
            assert error["status"] == 400 and error["error"]["param"] == param, error
            assert all(name in error["error"]["message"] for name in names), (names, error)
            expected_lane = message.get("stream_id") if isinstance(message, dict) else None
            assert error.get("stream_id") == expected_lane
        setup.runner.delay_s = 0
        assert well_formed(create(socket, input="after"))["status"] == "completed"


def test_a_continuation_refused_while_its_response_runs_forgets_it(setup: Setup) -> None:
    slow_reply(setup)
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "my name is Ada", "store": False}))
        running = until_event(socket, "response.output_text.delta")[0]["response"]["id"]
        socket.send_text(
            json.dumps(
                {"type": "response.create", "input": "x", "store": False, "previous_response_id": running, "top_p": 7}
            )
        )
        seen = until_terminal(socket)
        assert seen[-1]["type"] == "error" and seen[-1]["error"]["param"] == "top_p"
        assert f"previous_response_id '{running}'" in seen[-1]["error"]["message"]
        assert until_terminal(socket)[-1]["type"] == "response.completed"
        setup.runner.delay_s = 0
        again = create(socket, input="what is my name", store=False, previous_response_id=running)
        assert again[0]["error"]["code"] == "previous_response_not_found"


def test_store_false_continues_only_on_its_own_connection(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        first = well_formed(create(socket, input="my name is Ada", store=False))
        second = well_formed(create(socket, input="what is my name", store=False, previous_response_id=first["id"]))
        seen = [message.content for message in setup.renderer.rendered[-1]]
        assert seen[0] == "my name is Ada" and seen[-1] == "what is my name" and len(seen) == 3
        assert second["previous_response_id"] == first["id"]
        # The chain goes on from the newest response; the older one is no longer held.
        third = create(socket, input="and again", store=False, previous_response_id=second["id"])
        assert well_formed(third)["status"] == "completed"
        assert len(setup.renderer.rendered[-1]) == 5
        stale = create(socket, input="x", store=False, previous_response_id=first["id"])
        assert stale[0]["error"]["code"] == "previous_response_not_found"
        # A stored response cannot continue an unstored one (its chain could not be read back later).
        fresh = well_formed(create(socket, input="remember", store=False))
        mixed = create(socket, input="x", previous_response_id=fresh["id"])
        assert mixed[0]["error"]["param"] == "store"
        # ...and that failed continuation forgot what it continued.
        retried = create(socket, input="x", store=False, previous_response_id=fresh["id"])
        assert retried[0]["error"]["code"] == "previous_response_not_found"
        last = well_formed(create(socket, input="one more", store=False))
    with setup.client.websocket_connect("/v1/responses") as other:
        elsewhere = create(other, input="x", store=False, previous_response_id=last["id"])
        assert elsewhere[0]["error"]["code"] == "previous_response_not_found"


def test_a_failed_generation_is_a_nested_error_event_then_response_failed(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        first = well_formed(create(socket, input="hello", store=False))
        setup.runner.fail_after = 2
        socket.send_text(
            json.dumps({"type": "response.create", "input": "x", "store": False, "previous_response_id": first["id"]})
        )
        events = until_terminal(socket)
        for event in events:
            SOCKET_EVENT.validate_python(event)
        error = next(event for event in events if event["type"] == "error")
        assert error["error"]["message"] == "the fake model broke" and isinstance(error["sequence_number"], int)
        assert events[-1]["type"] == "response.failed"
        setup.runner.fail_after = None
        retried = create(socket, input="x", store=False, previous_response_id=first["id"])
        assert retried[0]["error"]["code"] == "previous_response_not_found"


def test_messages_sent_together_run_one_at_a_time_in_order(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        for index in range(3):
            socket.send_text(
                json.dumps({"type": "response.create", "input": f"q{index}", "metadata": {"n": str(index)}})
            )
        finals = [well_formed(until_terminal(socket)) for _ in range(3)]
    assert [final["metadata"]["n"] for final in finals] == ["0", "1", "2"]


def test_closing_the_socket_cancels_the_running_response(setup: Setup) -> None:
    setup.runner.delay_s = 0.05
    setup.runner.reply = [f"w{index}" for index in range(400)]
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": "long story"}))
        while json.loads(socket.receive_text())["type"] != "response.output_text.delta":
            pass
        response_id = setup.runner.jobs[-1].response_id
    deadline = time.monotonic() + 10
    stored = setup.client.get(f"/v1/responses/{response_id}").json()
    while stored["status"] == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
        stored = setup.client.get(f"/v1/responses/{response_id}").json()
    assert stored["status"] == "cancelled" and setup.runner.runs[response_id].cancelled
    assert stored["usage"]["output_tokens"] < 400


@pytest.mark.settings(api_keys=["k1"])
def test_the_upgrade_needs_the_same_key_as_http(setup: Setup) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}):
        with (
            pytest.raises(WebSocketDenialResponse) as denied,
            setup.client.websocket_connect("/v1/responses", headers=headers),
        ):
            pass
        assert denied.value.status_code == 401
        assert denied.value.json()["error"]["type"] == "authentication_error"
    with setup.client.websocket_connect("/v1/responses", headers={"authorization": "Bearer k1"}) as socket:
        assert well_formed(create(socket, input="hi"))["status"] == "completed"


@pytest.mark.settings(max_concurrent_requests_per_tenant=1, max_websockets_per_tenant=1)
def test_a_connection_takes_a_request_slot_only_while_a_response_runs(setup: Setup) -> None:
    """Connections are counted apart (a second one is refused), and an idle one leaves the tenant's requests
    their slots: a connection at work holds one, and its create is refused while the requests hold them all."""
    slow_reply(setup, words=30)
    with setup.client.websocket_connect("/v1/responses") as socket:
        with (
            pytest.raises(WebSocketDenialResponse) as denied,
            setup.client.websocket_connect("/v1/responses"),
        ):
            pass
        assert denied.value.status_code == 429
        assert denied.value.json()["error"]["code"] == "rate_limit_exceeded"
        assert "WebSocket connections open" in denied.value.json()["error"]["message"]
        assert setup.client.get("/v1/models").status_code == 200  # open, idle: no request slot taken
        socket.send_text(json.dumps({"type": "response.create", "input": "hi"}))
        assert json.loads(socket.receive_text())["type"] == "response.created"
        reply = setup.client.get("/v1/models")  # the response running on it holds the tenant's one slot
        assert reply.status_code == 429 and reply.headers["retry-after"] == "1"
        events = until_terminal(socket)
        assert events[-1]["type"] == "response.completed"
        assert setup.client.get("/v1/models").status_code == 200  # given back when the response ended
    with setup.client.websocket_connect("/v1/responses") as socket:  # the first connection's place is free
        assert well_formed(create(socket, input="hi"))["status"] == "completed"


@pytest.mark.settings(max_concurrent_requests_per_tenant=1)
def test_a_create_on_a_connection_is_refused_while_the_tenants_requests_hold_every_slot(setup: Setup) -> None:
    slow_reply(setup, words=30)
    with (
        setup.client.websocket_connect("/v1/responses") as busy,
        setup.client.websocket_connect("/v1/responses") as other,
    ):
        busy.send_text(json.dumps({"type": "response.create", "input": "long"}))
        assert json.loads(busy.receive_text())["type"] == "response.created"
        other.send_text(json.dumps({"type": "response.create", "input": "refused", "event_id": "e7", "stream_id": "l"}))
        refused = json.loads(other.receive_text())
        assert refused["type"] == "error" and refused["status"] == 429, refused
        assert refused["error"]["code"] == "rate_limit_exceeded" and refused["stream_id"] == "l"
        assert refused["error"]["message"].startswith("In reply to 'response.create' (event_id 'e7'): ")
        assert until_terminal(busy)[-1]["type"] == "response.completed"
        # The connection stays open and its next create runs once a slot is free.
        assert well_formed(create(other, input="now"))["status"] == "completed"


def _database_starting_up(*_: object, **__: object) -> None:
    try:
        raise asyncpg.exceptions.CannotConnectNowError("the database system is starting up")
    except Exception as raised:
        raise DBAPIError("INSERT", None, raised) from raised


def _queue_gone(*_: object, **__: object) -> None:
    raise RedisConnectionError("Error 111 connecting to redis")


@pytest.mark.parametrize(("target", "outage"), [("insert_response", _database_starting_up), ("enqueue", _queue_gone)])
def test_an_outage_is_the_same_503_as_http_and_the_socket_stays_usable(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, target: str, outage: Any
) -> None:
    with monkeypatch.context() as patch:
        if target == "enqueue":
            patch.setattr(type(setup.client.app.state.runtime.queue), "enqueue", outage)  # type: ignore[attr-defined]
        else:
            patch.setattr(repository, target, outage)
        http = setup.client.post("/v1/responses", json={"input": "hi", "stream": True})
        with setup.client.websocket_connect("/v1/responses") as socket:
            socket.send_text(json.dumps({"type": "response.create", "input": "hi", "stream_id": "s"}))
            error = json.loads(socket.receive_text())
            patch.undo()
            assert http.status_code == 503, http.text
            said = http.json()["error"]
            # The same error as HTTP, its message led by the event it answers.
            assert error["error"]["message"] == f"In reply to 'response.create': {said['message']}"
            assert error == {
                "type": "error",
                "status": 503,
                "error": {**said, "message": error["error"]["message"]},
                "stream_id": "s",
            }
            SOCKET_EVENT.validate_python(error)
            # The connection outlives the outage.
            assert well_formed(create(socket, input="after"))["status"] == "completed"


@pytest.mark.settings(max_request_bytes=4096)
def test_the_message_size_limit_counts_utf8_bytes_as_http_does(setup: Setup) -> None:
    emoji = "\N{GRINNING FACE}" * 1200  # 1,200 characters, 4,800 bytes
    with setup.client.websocket_connect("/v1/responses") as socket:
        socket.send_text(json.dumps({"type": "response.create", "input": emoji}, ensure_ascii=False))
        error = json.loads(socket.receive_text())
        assert error["type"] == "error" and error["status"] == 413, error
        assert error["error"]["code"] == "request_too_large"
        assert well_formed(create(socket, input="\N{GRINNING FACE}" * 100))["status"] == "completed"
    over = json.dumps({"input": emoji}, ensure_ascii=False).encode()
    assert setup.client.post("/v1/responses", content=over).status_code == 413


@pytest.mark.settings(websocket_max_queued=1)
def test_a_full_queue_of_creates_stops_the_reading_until_one_starts(setup: Setup) -> None:
    slow_reply(setup, words=20)  # about a second each
    with setup.client.websocket_connect("/v1/responses") as socket:
        for name in ("first", "second", "third"):
            socket.send_text(json.dumps({"type": "response.create", "input": name}))
        socket.send_text("not json")
        events: list[dict] = []
        while sum(event["type"] in TERMINAL for event in events) < 3 or not any(
            event["type"] == "error" for event in events
        ):
            events.append(json.loads(socket.receive_text()))
    kinds = [event["type"] for event in events]
    # The first runs, the second waits in the queue, the third waits for room: the bad message behind it is
    # read (and answered) only once the second starts, after the first has ended.
    assert kinds.index("error") > kinds.index("response.completed"), kinds
    assert kinds.count("response.completed") == 3


@pytest.mark.settings(websocket_idle_timeout_s=0.5, max_websockets_per_tenant=1)
def test_an_idle_connection_is_closed_and_gives_its_place_back(setup: Setup) -> None:
    slow_reply(setup, words=30)  # runs longer than the idle timeout: a connection at work is not idle
    with setup.client.websocket_connect("/v1/responses") as socket:
        started = time.monotonic()
        assert well_formed(create(socket, input="hi"))["status"] == "completed"
        assert time.monotonic() - started > 1
        closed = socket.receive()
        assert closed["type"] == "websocket.close" and closed["code"] == 1000, closed
    with setup.client.websocket_connect("/v1/responses") as socket:  # its place (the tenant's one) is free again
        assert well_formed(create(socket, input="hi"))["status"] == "completed"
