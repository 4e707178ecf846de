"""What the worker-fault tests share: starting workers, and reading what the database and the replay hold."""

from __future__ import annotations

from typing import Any

import httpx

from app.testing.cluster import Cluster, ServerProcess, db_rows
from app.testing.sse import parse_sse


def start_worker(cluster: Cluster, workers: list[ServerProcess], api: ServerProcess, **env: str) -> ServerProcess:
    worker = cluster.worker(**env)
    workers.append(worker)
    cluster.wait_ready(api)
    return worker


def deltas(events: list[dict[str, Any]]) -> int:
    return sum(event["type"] == "response.output_text.delta" for event in events)


def row(cluster: Cluster, response_id: str) -> dict[str, Any]:
    found = db_rows(
        cluster.database_url,
        "SELECT status, attempts, lease_owner, cancel_requested_at, job IS NULL AS job_dropped,"
        " NOT EXISTS (SELECT 1 FROM generation_progress WHERE response_id = $1) AS progress_dropped"
        " FROM responses WHERE id = $1",
        response_id,
    )
    assert found, response_id
    return found[0]


def stored_events(api: ServerProcess, response_id: str) -> list[dict[str, Any]]:
    replay = httpx.get(f"{api.base_url}/v1/responses/{response_id}", params={"stream": "true"}, timeout=60)
    return parse_sse(replay.text)
