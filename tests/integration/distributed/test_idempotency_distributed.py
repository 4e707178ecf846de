"""Idempotency-Key in distributed mode (two API nodes, a worker, Postgres, the real model): the key's record is in
the database, so either node answers a retry, and the same key sent to both nodes at once runs once."""

from __future__ import annotations

import contextlib
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from app.testing.sse import parse_sse
from tests.integration.distributed.cluster import Cluster, model_of
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

STORY = "Write a long story about a dragon who learns to bake bread."


def listed(cluster: Cluster, case: str) -> list[str]:
    """The ids of the stored responses whose metadata says `case`, as either node lists them."""
    url = f"{cluster.api_a.base_url}/v1/responses"
    return [found["id"] for found in httpx.get(url, params={"metadata[case]": case}, timeout=30).json()["data"]]


def test_the_same_key_at_both_nodes_at_once_runs_once(cluster: Cluster) -> None:
    body = {"input": "What is 2+2?", "temperature": 0, "max_output_tokens": 24, "metadata": {"case": "both-nodes"}}
    headers = {"Idempotency-Key": str(uuid.uuid4())}

    def create(base_url: str) -> httpx.Response:
        return httpx.post(f"{base_url}/v1/responses", json=body, headers=headers, timeout=600)

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(create, [cluster.api_a.base_url, cluster.api_b.base_url] * 2))
    assert [reply.status_code for reply in replies] == [200] * 4, [reply.text for reply in replies]
    answers = [reply.json() for reply in replies]
    assert len({answer["id"] for answer in answers}) == 1 and answers[0]["status"] == "completed"
    assert all(answer == answers[0] for answer in answers)
    assert listed(cluster, "both-nodes") == [answers[0]["id"]]


def test_an_sdk_create_whose_tries_time_out_is_one_response_that_any_node_answers(cluster: Cluster) -> None:
    tries = 0

    def count(request: httpx.Request) -> None:
        nonlocal tries
        tries += request.method == "POST"

    hasty = openai.OpenAI(
        base_url=f"{cluster.api_a.base_url}/v1",
        api_key="x",
        timeout=0.2,
        max_retries=2,
        http_client=httpx.Client(event_hooks={"request": [count]}),
    )
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body: dict[str, Any] = {
        "model": model_of(cluster.client(cluster.api_a)),
        "input": STORY,
        "temperature": 0,
        "max_output_tokens": 64,
        "metadata": {"case": "sdk-timeouts"},
    }
    # 64 tokens take longer than the timeout (~0.55 s at 115 tokens/s), each try: the key still names one response.
    with hasty, contextlib.suppress(openai.APITimeoutError):
        hasty.responses.create(**body, extra_headers=key)
    assert tries >= 2
    # The other node answers the retry, once the one response has ended (a generous timeout: a loaded machine).
    with openai.OpenAI(base_url=f"{cluster.api_b.base_url}/v1", api_key="x", timeout=600, max_retries=0) as patient:
        response = patient.responses.create(**body, extra_headers=key)
        assert patient.responses.retrieve(response.id).model_dump() == response.model_dump()
    assert response.status in ("completed", "incomplete") and response.output_text
    assert listed(cluster, "sdk-timeouts") == [response.id]


def test_a_stream_retried_on_the_other_node_is_the_same_stream(cluster: Cluster) -> None:
    body = {
        "input": STORY,
        "stream": True,
        "temperature": 0,
        "max_output_tokens": 48,
        "metadata": {"case": "stream-elsewhere"},
    }
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    seen: list[dict[str, Any]] = []
    url = "/v1/responses"
    with httpx.stream("POST", cluster.api_a.base_url + url, json=body, headers=headers, timeout=600) as first:
        for line in first.iter_lines():
            if line.startswith("data: {"):
                seen.append(json.loads(line[6:]))
            if seen and seen[-1]["type"] == "response.output_text.delta":
                break  # the client leaves (a timeout, a lost connection) mid-stream
    retry = httpx.post(cluster.api_b.base_url + url, json=body, headers=headers, timeout=600)
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    events = parse_sse(retry.text)
    final = assert_well_formed_stream(events)
    assert events[: len(seen)] == seen  # the first client's events again, then the rest: one generation
    assert final["status"] in ("completed", "incomplete") and final["id"] == seen[0]["response"]["id"]
    assert listed(cluster, "stream-elsewhere") == [final["id"]]
    assert httpx.get(f"{cluster.api_b.base_url}/v1/responses/{final['id']}", timeout=30).json() == final
