"""Fault figures (not a test): real API nodes and workers on a private Postgres and Redis, broken on purpose.

    .venv/bin/python -m bench.faults [--queued 100] [--json out.json]

Prints one row per fault: time from the fault to the terminal state (or to the resumed stream's end), events
lost or duplicated, responses stuck (not terminal 60 s after), cancels lost, and for the Postgres outage the
5xx answers and the time until requests succeed again. Also a structured-output takeover, DELETE while
generating, and a database error injected at the final commit. Default settings (15 s lease, 5 s reconciliation).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES
from app.testing.cluster import (
    NUMBERS,
    STORY,
    Cluster,
    PostgresServer,
    RedisServer,
    ServerProcess,
    StreamReader,
    db_fetch,
    injected,
    poll_terminal,
    private_cluster,
    sigkill,
    wait_for_status,
    worker_id,
)
from app.testing.sse import parse_sse

STUCK_AFTER_S = 60.0
Row = dict[str, Any]


def _stream_body(tokens: int, **extra: Any) -> dict[str, Any]:
    return {"input": STORY, "stream": True, "max_output_tokens": tokens, "temperature": 0, **extra}


def _has_delta(events: list[dict[str, Any]]) -> bool:
    return any(event["type"] == "response.output_text.delta" for event in events)


def _gaps(sequence: list[int]) -> tuple[int, int]:
    """(lost, duplicated) sequence numbers in what a client received, against 0..max."""
    if not sequence:
        return 0, 0
    lost = len(set(range(max(sequence) + 1)) - set(sequence))
    return lost, len(sequence) - len(set(sequence))


def _resume(base: str, response_id: str, after: int) -> list[dict[str, Any]]:
    reply = httpx.get(
        f"{base}/v1/responses/{response_id}", params={"stream": "true", "starting_after": after}, timeout=120
    )
    return parse_sse(reply.text)


def api_node_killed(cluster: Cluster, api: ServerProcess) -> Row:
    doomed = cluster.api("doomed_api")
    reader = StreamReader("POST", f"{doomed.base_url}/v1/responses", _stream_body(200, background=True))
    reader.wait_for(lambda events: len(events) >= 6, 60)
    sigkill(doomed)
    killed = time.monotonic()
    reader.join(10)
    seen = list(reader.events)
    response_id = seen[0]["response"]["id"]
    rest = _resume(api.base_url, response_id, seen[-1]["sequence_number"])
    lost, duplicated = _gaps([event["sequence_number"] for event in seen + rest])
    final = poll_terminal(api.base_url, response_id, STUCK_AFTER_S)
    return {
        "fault": "API node SIGKILL during a background stream, resumed through another node",
        "to_terminal_s": time.monotonic() - killed,
        "lost": lost,
        "duplicated": duplicated,
        "stuck": int(final.get("status") not in TERMINAL_STATUSES),
        "final": final.get("status"),
    }


#: A background stream whose output is a JSON document (its takeover goes on under the same grammar).
STRUCTURED = {
    "input": "List twenty numbers.",
    "max_output_tokens": 160,
    "text": {"format": {"type": "json_schema", "name": "numbers", "schema": NUMBERS}},
}


def worker_killed(
    cluster: Cluster, api: ServerProcess, workers: list[ServerProcess], *, second: bool, structured: bool = False
) -> Row:
    """SIGKILL the worker running a background stream; with `second`, another worker is alive, else a new one is
    started right after the kill (as an orchestrator would). `structured`: a json_schema stream, whose output
    must still be one valid document."""
    for worker in workers:
        worker.stop()
    workers.clear()
    workers.append(cluster.worker("worker"))
    if second:  # both ready before the stream starts, as a running fleet is; either may take the job
        workers.append(cluster.worker("second"))
        for worker in workers:
            worker_id(worker)
    cluster.wait_ready(api)
    body = _stream_body(400, background=True) | (STRUCTURED if structured else {})
    reader = StreamReader("POST", f"{api.base_url}/v1/responses", body)
    reader.wait_for(_has_delta, 60)
    owner = db_fetch(cluster.database_url, "SELECT lease_owner FROM responses WHERE id = $1", reader.response_id)
    holder = next((worker for worker in workers if worker_id(worker) == owner), workers[0])
    sigkill(holder)
    killed = time.monotonic()
    workers.remove(holder)
    if not second:
        workers.append(cluster.worker("restarted"))
    reader.join(STUCK_AFTER_S + 60)
    final = poll_terminal(api.base_url, reader.response_id or "", STUCK_AFTER_S)
    lost, duplicated = _gaps([event["sequence_number"] for event in reader.events])
    row: Row = {
        "fault": f"worker SIGKILL mid-stream{', structured output' if structured else ''}, "
        f"{'a second worker alive' if second else 'no other worker (restarted)'}",
        "to_terminal_s": (reader.ended_at or time.monotonic()) - killed,
        "lost": lost,
        "duplicated": duplicated,
        "stuck": int(final.get("status") not in TERMINAL_STATUSES),
        "final": final.get("status"),
        "stream_ended": reader.done and reader.terminal is not None,
    }
    if structured:
        row["valid_json"] = _is_json("".join(_texts(final)))
    return row


def _texts(response: dict[str, Any]) -> list[str]:
    return [
        part.get("text", "")
        for item in response.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    ]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def delete_while_generating(cluster: Cluster, api: ServerProcess, workers: list[ServerProcess]) -> Row:
    """DELETE a background response while it generates: how long the DELETE took, how long until its worker let
    go of the job (the generation stopped), and whether anything of it is left in the database."""
    if not workers:
        workers.append(cluster.worker("worker"))
    cluster.wait_ready(api)
    response_id = _create_background(api.base_url, tokens=2000, prompt=STORY)
    wait_for_status(api.base_url, response_id, {"in_progress"}, 60)
    time.sleep(0.3)
    started = time.monotonic()
    deleted = httpx.delete(f"{api.base_url}/v1/responses/{response_id}", timeout=60)
    delete_s = time.monotonic() - started
    with redis.Redis.from_url(cluster.redis_url) as connection:
        while connection.exists(f"llama-responses:holder:{response_id}") and time.monotonic() - started < 60:
            time.sleep(0.05)
        stopped_s = None if connection.exists(f"llama-responses:holder:{response_id}") else time.monotonic() - started
    left = sum(
        int(db_fetch(cluster.database_url, f"SELECT count(*) FROM {table} WHERE {column} = $1", response_id))
        for table, column in (("responses", "id"), ("response_events", "response_id"))
    )
    return {
        "fault": "DELETE while generating",
        "deleted": deleted.status_code == 200 and bool(deleted.json().get("deleted")),
        "delete_s": delete_s,
        "generation_stopped_s": stopped_s,
        "rows_left": left,
    }


def final_commit_error(cluster: Cluster, api: ServerProcess, workers: list[ServerProcess]) -> Row:
    """A database error injected at the final commit (a trigger refusing the completed row): the response must
    end failed, its stream with it, and GET must say the same."""
    if not workers:
        workers.append(cluster.worker("worker"))
    cluster.wait_ready(api)
    refuse = "BEFORE UPDATE ON responses FOR EACH ROW WHEN (NEW.status IN ('completed', 'incomplete'))"
    with injected(cluster, "refuse_final", refuse, "BEGIN RAISE EXCEPTION 'injected fault'; END"):
        started = time.monotonic()
        reader = StreamReader("POST", f"{api.base_url}/v1/responses", _stream_body(16, background=True))
        reader.join(STUCK_AFTER_S)
    terminal = reader.terminal or {}
    response_id = reader.response_id or ""
    got = httpx.get(f"{api.base_url}/v1/responses/{response_id}", timeout=30).json()
    return {
        "fault": "database error at the final commit",
        "to_terminal_s": (reader.ended_at or time.monotonic()) - started,
        "final": terminal.get("type"),
        "get_equals_terminal": got == terminal.get("response"),
        "stuck": int(got.get("status") not in TERMINAL_STATUSES),
    }


def _create_background(base: str, tokens: int = 16, prompt: str = "Hi!") -> str:
    reply = httpx.post(
        f"{base}/v1/responses",
        json={"input": prompt, "background": True, "max_output_tokens": tokens, "temperature": 0},
        timeout=30,
    )
    reply.raise_for_status()
    return str(reply.json()["id"])


def _settle(base: str, ids: list[str], started: float) -> tuple[float, int, dict[str, int]]:
    finals = [poll_terminal(base, response_id, STUCK_AFTER_S).get("status") for response_id in ids]
    counts: dict[str, int] = {}
    for status in finals:
        counts[str(status)] = counts.get(str(status), 0) + 1
    stuck = sum(status not in TERMINAL_STATUSES for status in finals)
    return time.monotonic() - started, stuck, counts


def redis_restart_queued(
    cluster: Cluster, api: ServerProcess, workers: list[ServerProcess], redis_server: RedisServer, queued: int
) -> Row:
    for worker in workers:
        worker.stop()
    workers.clear()
    ids = [_create_background(api.base_url) for _ in range(queued)]
    redis_server.stop()
    redis_server.start()
    restarted = time.monotonic()
    workers.append(cluster.worker("worker"))
    elapsed, stuck, counts = _settle(api.base_url, ids, restarted)
    return {
        "fault": f"Redis restart with {queued} jobs queued (no worker running)",
        "to_terminal_s": elapsed,
        "stuck": stuck,
        "final": counts,
    }


def redis_restart_running(
    cluster: Cluster, api: ServerProcess, workers: list[ServerProcess], redis_server: RedisServer
) -> Row:
    cluster.wait_ready(api)
    ids = [_create_background(api.base_url, tokens=300) for _ in range(4)]
    for response_id in ids:
        wait_for_status(api.base_url, response_id, {"in_progress"}, 60)
    redis_server.stop()
    time.sleep(2)
    redis_server.start()
    restarted = time.monotonic()
    elapsed, stuck, counts = _settle(api.base_url, ids, restarted)
    alive = sum(worker.process is not None and worker.process.poll() is None for worker in workers)
    return {
        "fault": "Redis restart (down 2 s) with 4 jobs running",
        "to_terminal_s": elapsed,
        "stuck": stuck,
        "final": counts,
        "workers_alive_after": f"{alive}/{len(workers)}",
    }


def cancels(api: ServerProcess, workers: list[ServerProcess], rounds: int = 5) -> Row:
    """Cancel while queued (before any worker is free) and while generating; lost = not cancelled, or the output
    grew after the cancel returned. The generating ones ask for a long story: a short answer would have ended
    before its cancel arrived (a 400, not a lost cancel)."""
    lost = 0
    latencies = []
    for _ in range(rounds):
        response_id = _create_background(api.base_url, tokens=2000, prompt=STORY)
        if not wait_for_status(api.base_url, response_id, {"in_progress"}, 60):
            lost += 1
            continue
        time.sleep(0.3)
        started = time.monotonic()
        cancelled = httpx.post(f"{api.base_url}/v1/responses/{response_id}/cancel", timeout=60).json()
        latencies.append(time.monotonic() - started)
        time.sleep(0.5)
        after = httpx.get(f"{api.base_url}/v1/responses/{response_id}", timeout=30).json()
        lost += int(cancelled.get("status") != "cancelled" or after != cancelled)
    for worker in workers:
        worker.stop()
    queued = [_create_background(api.base_url) for _ in range(rounds)]
    replies = [httpx.post(f"{api.base_url}/v1/responses/{rid}/cancel", timeout=60).json() for rid in queued]
    lost += sum(reply.get("status") != "cancelled" for reply in replies)
    return {
        "fault": f"cancel, {rounds} while generating + {rounds} while queued",
        "cancels_lost": lost,
        "cancel_latency_max_s": max(latencies) if latencies else None,
    }


def postgres_outage(api: ServerProcess, postgres: PostgresServer, down_s: float) -> Row:
    answers: list[tuple[float, int | str]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=api.base_url, timeout=10) as http:
            calls: list[Callable[[], httpx.Response]] = [
                lambda: http.get("/v1/responses/resp_missing"),
                lambda: http.post("/v1/responses", json={"input": "Hi!", "background": True, "max_output_tokens": 16}),
                lambda: http.get("/ready"),
            ]
            while not stop.is_set():
                for call in calls:
                    try:
                        answers.append((time.monotonic(), call().status_code))
                    except httpx.HTTPError as error:
                        answers.append((time.monotonic(), type(error).__name__))
                time.sleep(0.1)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    time.sleep(1)
    postgres.stop("fast")
    time.sleep(down_s)
    postgres.start()
    back = time.monotonic()
    while time.monotonic() - back < 30 and not any(t > back and s in (200, 404) for t, s in answers):
        time.sleep(0.1)
    time.sleep(1)
    stop.set()
    thread.join(30)
    statuses = [status for _, status in answers]
    recovered = [t - back for t, s in answers if t > back and s in (200, 404)]
    return {
        "fault": f"Postgres stopped {down_s:.0f} s under load (GET, background create, /ready)",
        "requests": len(statuses),
        "answered_503": statuses.count(503),
        "answered_500": statuses.count(500),
        "other_5xx_or_dropped": sum(not isinstance(s, int) or (s >= 500 and s not in (500, 503)) for s in statuses),
        "to_recover_s": recovered[0] if recovered else None,
    }


def unstored_worker_killed(cluster: Cluster, api: ServerProcess, workers: list[ServerProcess]) -> Row:
    workers.append(cluster.worker("worker"))
    cluster.wait_ready(api)
    reader = StreamReader("POST", f"{api.base_url}/v1/responses", _stream_body(2000, store=False))
    reader.wait_for(_has_delta, 60)
    for worker in workers:
        sigkill(worker)
    killed = time.monotonic()
    reader.join(STUCK_AFTER_S)
    workers.clear()
    return {
        "fault": "store: false stream, its worker SIGKILLed",
        "to_terminal_s": (reader.ended_at or time.monotonic()) - killed,
        "final": reader.terminal["type"] if reader.terminal else None,
        "stuck": int(reader.alive or reader.terminal is None or reader.terminal["type"] not in TERMINAL_EVENT_TYPES),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=100, help="jobs queued when Redis restarts")
    parser.add_argument("--postgres-down-s", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows: list[Row] = []
    logs = Path(tempfile.mkdtemp(prefix="llama-responses-bench-faults-"))
    with private_cluster(logs) as (cluster, postgres, redis_server):
        api = cluster.api("api")
        workers = [cluster.worker("worker")]
        cluster.wait_ready(api)
        steps: list[Callable[[], Row]] = [
            lambda: api_node_killed(cluster, api),
            lambda: worker_killed(cluster, api, workers, second=True),
            lambda: worker_killed(cluster, api, workers, second=False),
            lambda: worker_killed(cluster, api, workers, second=True, structured=True),
            lambda: delete_while_generating(cluster, api, workers),
            lambda: final_commit_error(cluster, api, workers),
            lambda: redis_restart_queued(cluster, api, workers, redis_server, args.queued),
            lambda: redis_restart_running(cluster, api, workers, redis_server),
            lambda: postgres_outage(api, postgres, args.postgres_down_s),
            lambda: cancels(api, workers),
            lambda: unstored_worker_killed(cluster, api, workers),
        ]
        for step in steps:
            try:
                row = step()
            except Exception as error:  # one broken scenario still lets the others report
                row = {"fault": getattr(step, "__name__", "step"), "error": repr(error)}
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    print(f"logs: {logs}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
