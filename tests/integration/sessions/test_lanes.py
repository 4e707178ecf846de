"""WebSocket lanes (`stream_id`) on the real model, embedded mode: two lanes of one connection run side by side,
each branching from the same earlier response."""

from __future__ import annotations

import openai
import pytest

from tests.protocol import SOCKET_EVENT, assert_well_formed_stream, branching_lanes_exchange, socket_exchange

#: On SQLite only: what these prove is the engine's and the session's, not the database's (distributed mode's tests
#: run the same on Postgres), and each costs a minute or more on the CI machine.
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

#: Long enough that the short lane, started at the long one's first token, ends first unless the lanes take turns.
LONG = {"input": "Count from 1 to 500, separated by commas.", "max_output_tokens": 64}
SHORT = {"input": "What is my name? One word.", "max_output_tokens": 16}


def test_two_lanes_side_by_side_branching_from_one_response(client: openai.OpenAI, model: str) -> None:
    fields = {"model": model, "temperature": 0}
    with client.responses.connect() as connection:
        origin = assert_well_formed_stream(
            socket_exchange(connection, input="My name is Ada.", max_output_tokens=16, stream_id="long", **fields),
            union=SOCKET_EVENT,
        )
        long, short, ended = branching_lanes_exchange(
            connection, origin["id"], long={**LONG, **fields}, short={**SHORT, **fields}
        )
    # Had the lanes taken turns, the short one would have waited for the long one's 64 tokens.
    assert ended == ["short", "long"]
    assert long["previous_response_id"] == short["previous_response_id"] == origin["id"]
    assert short["status"] in {"completed", "incomplete"} and long["status"] in {"completed", "incomplete"}
    # Both read the origin (its input and output) before their own input: branches, not a chain of each other.
    for branch in (long, short):
        assert branch["usage"]["input_tokens"] > origin["usage"]["input_tokens"] + origin["usage"]["output_tokens"]
    assert short["usage"]["input_tokens"] < long["usage"]["input_tokens"] + long["usage"]["output_tokens"]
    assert client.responses.retrieve(short["id"]).previous_response_id == origin["id"]
