"""Lanes (`stream_id`) on one WebSocket connection, with the fake model: one lane's requests in order, lanes side
by side up to RESPONSES_WEBSOCKET_MAX_LANES, and a lane branching from a response made on another."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.protocol import SOCKET_EVENT, assert_well_formed_stream
from tests.unit.sessions.fake_app import TERMINAL, Setup


def create(socket: Any, lane: str | None, **fields: object) -> None:
    lane_field = {} if lane is None else {"stream_id": lane}
    socket.send_text(json.dumps({"type": "response.create", "input": "go", **lane_field, **fields}))


def read(socket: Any, responses: int) -> list[dict[str, Any]]:
    """Everything the socket sends until `responses` responses ended (an error event counts as one)."""
    events: list[dict[str, Any]] = []
    ended = 0
    while ended < responses:
        event = json.loads(socket.receive_text())
        SOCKET_EVENT.validate_python(event)
        events.append(event)
        ended += event["type"] in TERMINAL or event["type"] == "error"
    return events


def by_response(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    streams: dict[str, list[dict[str, Any]]] = {}
    current: dict[str | None, str] = {}
    for event in events:
        if "response" in event:
            current[event.get("stream_id")] = event["response"]["id"]
        if event["type"] != "error":
            streams.setdefault(current[event.get("stream_id")], []).append(event)
    return streams


def test_lanes_run_side_by_side_and_each_lane_in_order(setup: Setup) -> None:
    setup.runner.delay_s = 0.02
    setup.runner.reply = [f"w{index}" for index in range(15)]
    with setup.client.websocket_connect("/v1/responses") as socket:
        create(socket, "a", metadata={"n": "a1"})
        create(socket, "a", metadata={"n": "a2"})
        create(socket, "b", metadata={"n": "b1"})
        events = read(socket, 3)
    order = [
        (event["stream_id"], event["type"], event["response"]["metadata"]["n"])
        for event in events
        if "response" in event
    ]
    starts = [entry for entry in order if entry[1] == "response.created"]
    ends = [entry for entry in order if entry[1] in TERMINAL]
    # b1 started while a1 ran (side by side); a2 only once a1 had ended (in order on its lane).
    assert order.index(("b", "response.created", "b1")) < order.index(("a", "response.completed", "a1"))
    assert order.index(("a", "response.completed", "a1")) < order.index(("a", "response.created", "a2"))
    assert len(starts) == len(ends) == 3
    for stream in by_response(events).values():
        final = assert_well_formed_stream(stream, union=SOCKET_EVENT)
        assert final["status"] == "completed"
        assert {event["stream_id"] for event in stream} == {final["metadata"]["n"][0]}


@pytest.mark.settings(websocket_max_lanes=2)
def test_a_lane_beyond_the_limit_is_refused_and_taken_once_one_is_done(setup: Setup) -> None:
    setup.runner.delay_s = 0.02
    setup.runner.reply = [f"w{index}" for index in range(30)]
    with setup.client.websocket_connect("/v1/responses") as socket:
        create(socket, "a")
        create(socket, None)
        create(socket, "c", event_id="evt_c")
        refused = read(socket, 1)[-1]
        assert refused["type"] == "error" and refused["status"] == 400 and refused["stream_id"] == "c"
        assert refused["error"]["code"] == "too_many_lanes" and refused["error"]["param"] == "stream_id"
        assert "event_id 'evt_c'" in refused["error"]["message"]
        assert [event["type"] for event in read(socket, 2) if event["type"] in TERMINAL] == ["response.completed"] * 2
        setup.runner.delay_s = 0
        create(socket, "c")
        assert read(socket, 1)[-1]["type"] == "response.completed"


def test_a_lane_branches_from_a_response_made_on_another(setup: Setup) -> None:
    with setup.client.websocket_connect("/v1/responses") as socket:
        create(socket, "main", input="my name is Ada", store=False)
        root = read(socket, 1)[-1]["response"]
        # Two branches of the same unstored response, on two lanes: each reads the root's turn.
        create(socket, "left", input="left branch", store=False, previous_response_id=root["id"])
        create(socket, "right", input="right branch", store=False, previous_response_id=root["id"])
        finals = [event["response"] for event in read(socket, 2) if event["type"] in TERMINAL]
        assert {final["previous_response_id"] for final in finals} == {root["id"]}
        assert all(final["status"] == "completed" for final in finals)
        for rendered in setup.renderer.rendered[-2:]:
            seen = [message.content for message in rendered]
            assert seen[0] == "my name is Ada" and seen[-1] in {"left branch", "right branch"} and len(seen) == 3
        # Each lane keeps its own last response: both branches go on, and so does the root's lane.
        for final in finals:
            create(socket, "main", input="and then", store=False, previous_response_id=final["id"])
            assert read(socket, 1)[-1]["response"]["previous_response_id"] == final["id"]


def test_a_comparison_with_an_unstored_response_of_another_lane_finds_it_unchained(setup: Setup) -> None:
    # prompt_cache_options.comparison_response_id names a `store: false` response the connection keeps: found
    # whether or not the create also continues it, and whichever lane made it.
    setup.runner.cached_tokens = 10_000  # the fake engine reports the whole prefix reused
    with setup.client.websocket_connect("/v1/responses") as socket:
        create(socket, "a", input="the rules", store=False, prompt_cache_options={"prewarm": True})
        warm = read(socket, 1)[-1]["response"]
        assert warm["status"] == "completed" and warm["output"] == []
        compare = {"comparison_response_id": warm["id"]}
        create(socket, "b", input="the rules", store=False, prompt_cache_options=compare)
        unchained = read(socket, 1)[-1]["response"]
        create(socket, "b", input="the rules", store=False, prompt_cache_options={"comparison_response_id": "resp_x"})
        unknown = read(socket, 1)[-1]["response"]
    assert unchained["prompt_cache_diagnostics"] == {"type": "cache_hit"}
    assert unknown["prompt_cache_diagnostics"] == {"type": "comparison_response_not_found"}
