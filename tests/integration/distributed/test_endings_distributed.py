"""Distributed mode: a response ended by the worker that runs it and one ended by an API node (a cancel of a
queued job no worker has taken) have the same effects beside their end, each process having registered them at
its start-up: output items found by item_reference, the conversation turn finished, usage counted, the webhook
event in the outbox, prompt-cache diagnostics, the terminal event stored."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.testing.databases import connect
from app.testing.servers import RedisServer, ServerProcess
from app.testing.sse import parse_sse
from tests.integration.distributed.cluster import Cluster, model_of

pytestmark = pytest.mark.integration

EVENT_TYPES = ["response.completed", "response.failed", "response.cancelled", "response.incomplete"]


def effects_in(database_url: str, response_id: str, conversation_id: str) -> dict[str, Any]:
    """What the database holds beside the response's end."""

    async def read() -> dict[str, Any]:
        connection = await connect(database_url)
        try:
            row = await connection.fetchrow(
                "SELECT tenant, output, prompt_cache_diagnostics FROM responses WHERE id = $1", response_id
            )
            output = json.loads(row["output"]) if isinstance(row["output"], str) else row["output"]
            indexed = await connection.fetch("SELECT item_id FROM output_items WHERE response_id = $1", response_id)
            return {
                "output_ids": {item["id"] for item in output},
                "indexed": {record["item_id"] for record in indexed},
                "held_by": await connection.fetchval(
                    "SELECT active_response_id FROM conversations WHERE id = $1", conversation_id
                ),
                "webhook_events": [
                    record["event_type"]
                    for record in await connection.fetch(
                        "SELECT event_type FROM webhook_deliveries WHERE object_id = $1", response_id
                    )
                ],
                "diagnostics": row["prompt_cache_diagnostics"],
                "requests": await connection.fetchval(
                    "SELECT coalesce(sum(requests), 0) FROM usage WHERE tenant = $1", row["tenant"]
                ),
            }
        finally:
            await connection.close()

    return asyncio.run(read())


def start_on_conversation(base_url: str, model: str, compared_id: str) -> tuple[str, str]:
    """A background stream on a new conversation, compared with an earlier response: (its id, the conversation's);
    the stream is left after its first event (a background response goes on without its client)."""
    conversation = httpx.post(f"{base_url}/v1/conversations", json={}, timeout=30).json()
    body = {
        "model": model,
        "input": "Count from one to ten.",
        "background": True,
        "stream": True,
        "max_output_tokens": 16,
        "conversation": conversation["id"],
        "prompt_cache_options": {"comparison_response_id": compared_id},
    }
    with httpx.stream("POST", f"{base_url}/v1/responses", json=body, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: "):
                return json.loads(line.removeprefix("data: "))["response"]["id"], conversation["id"]
    raise AssertionError("the stream said nothing")


def ended(base_url: str, response_id: str, *statuses: str) -> dict[str, Any]:
    """The stored stream replayed, once it ended: its last event is the terminal one, equal to GET."""
    for _ in range(600):
        got = httpx.get(f"{base_url}/v1/responses/{response_id}", timeout=30).json()
        if got["status"] not in ("queued", "in_progress"):
            break
        time.sleep(0.1)
    assert got["status"] in statuses, got
    replayed = parse_sse(httpx.get(f"{base_url}/v1/responses/{response_id}", params={"stream": "true"}).text)
    assert replayed[-1]["type"] == f"response.{got['status']}" and replayed[-1]["response"] == got
    return got


def test_an_end_on_the_worker_and_one_on_an_api_node_have_the_same_effects(cluster: Cluster, tmp_path: Path) -> None:
    base = cluster.api_a.base_url
    model = model_of(cluster.client(cluster.api_a))
    hook = {"name": "all", "url": "https://example.com/hook", "event_types": EVENT_TYPES}
    assert httpx.post(f"{base}/v1/webhook_endpoints", json=hook, timeout=30).status_code == 200
    made = httpx.post(
        f"{base}/v1/responses", json={"model": model, "input": "Hi!", "max_output_tokens": 16}, timeout=120
    )
    assert made.status_code == 200, made.text
    compared = made.json()
    before = effects_in(cluster.database_url, compared["id"], "none")["requests"]

    # Ended by the worker's run that holds it.
    on_worker, worker_conversation = start_on_conversation(base, model, compared["id"])
    # (The model may stop at its 16 tokens: incomplete is an end of the held run too.)
    worker_status = ended(base, on_worker, "completed", "incomplete")["status"]
    worker_effects = effects_in(cluster.database_url, on_worker, worker_conversation)

    # Ended by an API node: a queued job that no worker takes (its node's Redis has none), cancelled.
    private = RedisServer().start()
    api = ServerProcess(
        {"RESPONSES_DATABASE_URL": cluster.database_url, "RESPONSES_REDIS_URL": private.url}, tmp_path / "api.log"
    ).start()
    try:
        queued, api_conversation = start_on_conversation(api.base_url, model, compared["id"])
        cancel = httpx.post(f"{api.base_url}/v1/responses/{queued}/cancel", timeout=60)
        assert cancel.json()["status"] == "cancelled", cancel.text
        ended(api.base_url, queued, "cancelled")
    finally:
        api.stop()
        private.stop()
    node_effects = effects_in(cluster.database_url, queued, api_conversation)

    for effects, status in ((worker_effects, worker_status), (node_effects, "cancelled")):
        assert effects["indexed"] == effects["output_ids"], "item_reference finds every output item"
        assert effects["held_by"] is None, "its conversation turn finished"
        assert effects["webhook_events"] == [f"response.{status}"]
        assert effects["diagnostics"] is not None
    assert worker_effects["output_ids"], "the worker's run said something"
    assert node_effects["requests"] == before + 2, "each end counted once"
