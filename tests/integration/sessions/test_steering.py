"""`response.steer` through the SDK against the real model (embedded mode): the running response stops steered at
a token boundary, and its successor answers the steering input with the same settings."""

from __future__ import annotations

import openai
import pytest

from tests.protocol import LONG_COUNT, STEERED_CAP, steered_exchange

#: On SQLite only: what these prove is the engine's and the session's, not the database's (distributed mode's tests
#: run the same on Postgres), and each costs a minute or more on the CI machine.
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]


def test_steering_a_running_response_through_the_sdk(client: openai.OpenAI, model: str) -> None:
    fields = {"model": model, "temperature": 0, "max_output_tokens": STEERED_CAP, "instructions": "Answer plainly."}
    with client.responses.connect() as connection:
        steering, steered, successor = steered_exchange(
            connection, "Stop. Just say the word OK.", input=LONG_COUNT, **fields
        )
    assert steering[0].type == "response.steer.accepted" and steering[0].steer.id.startswith("steer_")
    assert len(steering) == 1, steering
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    assert steered["usage"]["output_tokens"] < STEERED_CAP
    assert successor["status"] in {"completed", "incomplete"} and successor["previous_response_id"] == steered["id"]
    for name in ("temperature", "max_output_tokens", "instructions", "model"):
        assert successor[name] == steered[name], name
    # The successor read the steered response's output and then the steering input.
    assert successor["usage"]["input_tokens"] > steered["usage"]["input_tokens"] + steered["usage"]["output_tokens"]
    assert client.responses.retrieve(steered["id"]).incomplete_details.reason == "steered"  # type: ignore[union-attr]
