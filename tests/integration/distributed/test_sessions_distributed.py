"""Live-session features in distributed mode (an API node, a worker, Postgres and Redis, the real model, the
SDK): the prompt cache's prewarm and diagnostics, computed on the worker that holds the KV state, and WebSocket
lanes side by side."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from tests.integration.distributed.cluster import Cluster, model_of
from tests.protocol import SOCKET_EVENT, assert_well_formed_stream, branching_lanes_exchange, socket_exchange

pytestmark = pytest.mark.integration

#: A context long enough that its prefix state is saved (about 250 tokens).
RULES = " ".join(f"Rule {number}: the well number {number} must be kept covered." for number in range(20))
SHORT: dict[str, Any] = {"temperature": 0, "max_output_tokens": 16}


def compared_with(response: Response) -> dict[str, Any]:
    return {"prompt_cache_options": {"comparison_response_id": response.id}}


def diagnostics(response: Response) -> dict[str, Any]:
    assert response.prompt_cache_diagnostics is not None
    return response.prompt_cache_diagnostics.model_dump(exclude_none=True)


def test_a_prewarm_on_one_node_then_hits_and_a_miss_diagnosed_on_the_worker(cluster: Cluster) -> None:
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    fields: dict[str, Any] = {"model": model_of(a), "instructions": "You keep a village (distributed)."}
    warm = a.responses.create(**fields, input=RULES, prompt_cache_options={"prewarm": True})
    assert warm.output == [] and warm.usage is not None and warm.usage.output_tokens == 0
    # The API nodes hold no model: the worker whose KV the prewarm filled reports what it reused.
    turn = b.responses.create(**fields, input=RULES, **SHORT, **compared_with(warm))
    assert diagnostics(turn) == {"type": "cache_hit"}
    assert turn.usage is not None and turn.usage.input_tokens_details.cached_tokens == warm.usage.input_tokens - 1
    chained = a.responses.create(
        **fields, input="Which well is first?", previous_response_id=turn.id, **SHORT, **compared_with(turn)
    )
    assert diagnostics(chained) == {"type": "cache_hit"}
    assert chained.usage is not None and chained.usage.input_tokens_details.cached_tokens >= turn.usage.input_tokens
    # The input differs from its start: the worker can reuse the system prompt only, and says so.
    missed = b.responses.create(**fields, input=f"Note. {RULES}", **SHORT, **compared_with(warm))
    assert missed.usage is not None
    cached = missed.usage.input_tokens_details.cached_tokens
    assert cached < warm.usage.input_tokens - 100, missed.usage
    found = diagnostics(missed)
    assert found["type"] == "cache_miss" and found["reason"] == "input_changed", found
    assert found["cache_missed_tokens"] == missed.usage.input_tokens - cached
    assert diagnostics(a.responses.retrieve(missed.id)) == found


def test_two_lanes_side_by_side_on_the_workers_branching_from_one_response(cluster: Cluster) -> None:
    client = cluster.client(cluster.api_b)
    fields = {"model": model_of(client), "temperature": 0}
    with client.responses.connect() as connection:
        origin = assert_well_formed_stream(
            socket_exchange(connection, input="My name is Ada.", max_output_tokens=16, stream_id="long", **fields),
            union=SOCKET_EVENT,
        )
        long, short, ended = branching_lanes_exchange(
            connection,
            origin["id"],
            long={"input": "Count from 1 to 500, separated by commas.", "max_output_tokens": 64, **fields},
            short={"input": "What is my name? One word.", "max_output_tokens": 16, **fields},
        )
    # Had the lanes taken turns, the short one would have waited for the long one's 64 tokens.
    assert ended == ["short", "long"]
    assert long["previous_response_id"] == short["previous_response_id"] == origin["id"]
    for branch in (long, short):
        assert branch["usage"]["input_tokens"] > origin["usage"]["input_tokens"] + origin["usage"]["output_tokens"]
