"""The chaos test's invariants, checked on what the clients saw and on what the cluster holds once it is quiet,
and one watched while the load runs (a response waiting for a takeover must not read `in_progress`).

Each broken invariant is one Violation naming the response, so that a report says which response broke which
promise, and when (the fault timeline is printed beside it).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import redis
from arq.constants import in_progress_key_prefix, job_key_prefix

from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES
from app.testing.chaos_cluster import ChaosCluster, Clock
from app.testing.chaos_load import Recorder, Tracked
from app.testing.cluster import db_rows
from app.testing.sse import parse_sse
from app.transport.redis_queue import QUEUE_NAME, WORKERS_KEY

#: What each invariant promises, as a report prints it.
INVARIANTS = {
    "server_error": "no answer is a 5xx other than 503",
    "error_shape": 'every error answer is {"error": {"message", "type", "param", "code"}}',
    "unexpected_client_error": "no 4xx but a 429 or a 400 to the cancel of an ended response",
    "unreadable_answer": "every answer reads as the API documents it (no client operation broke off on one)",
    "request_timed_out": "every request is answered, and every stream moves, within the client's timeout",
    "lost": "every acknowledged response reads back (GET 200, the same id)",
    "not_terminal": "every response is terminal within the bound once the faults stop",
    "reply_not_terminal": "a foreground JSON answer is a terminal response",
    "background_failed": "no background response ends failed",
    "terminal_changed": "the terminal response a client saw is what GET returns at the end",
    "stream_not_exactly_once": "every stream: events numbered 0..n-1, one terminal event, last, equal to GET",
    "replay_not_exactly_once": "every background stream's replay: the same, and what its client saw",
    "cancel_lost": "an acknowledged cancel ends the response cancelled, as its answer said",
    "chain_previous": "every chain turn names its previous response",
    "waiting_reads_in_progress": "a response whose job waits for a takeover reads queued, not in_progress",
    "fault_promise": "a worker sent SIGTERM exits within its bound; every fault is undone",
}
NOT_TERMINAL_SQL = "SELECT id FROM responses WHERE status IN ('queued', 'in_progress') ORDER BY created_at"
ROW_SQL = (
    "SELECT status, background, stream, attempts, lease_owner, lease_expires_at, job IS NULL AS job_dropped,"
    " cancel_requested_at FROM responses WHERE id = $1"
)
FINAL_READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    response_id: str | None = None
    at_s: float | None = None


def is_openai_error(text: str) -> bool:
    try:
        body = json.loads(text)
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and {"message", "type", "param", "code"} <= set(error)


def answer_violations(recorder: Recorder) -> list[Violation]:
    """Invariants of every answer any client got."""
    found = [Violation("unreadable_answer", f"{op}: {what}", at_s=at) for at, op, what in recorder.crashes]
    for answer in recorder.answers:
        where = f"{answer.method} {answer.path} on node {answer.node} ({answer.op}, client {answer.client})"
        if answer.error == "ReadTimeout":
            found.append(Violation("request_timed_out", where, at_s=answer.at_s))
        if answer.status is None or answer.status < 400:
            continue
        if answer.status >= 500 and answer.status != 503:
            found.append(Violation("server_error", f"{answer.status} to {where}: {answer.body}", at_s=answer.at_s))
        if not is_openai_error(answer.body):
            found.append(Violation("error_shape", f"{answer.status} to {where}: {answer.body}", at_s=answer.at_s))
        ended_cancel = answer.status == 400 and answer.path.endswith("/cancel") and "Cannot cancel a" in answer.body
        if 400 <= answer.status < 500 and answer.status != 429 and not ended_cancel:
            found.append(
                Violation("unexpected_client_error", f"{answer.status} to {where}: {answer.body}", at_s=answer.at_s)
            )
    return found


def stream_defects(events: list[dict[str, Any]], *, whole: bool) -> list[str]:
    """How a stream breaks exactly-once: numbering, the terminal event; `whole`: its client read it to the end."""
    defects = []
    numbers = [event.get("sequence_number") for event in events]
    if numbers != list(range(len(numbers))):
        duplicated = sorted({n for n in numbers if numbers.count(n) > 1}, key=str)
        missing = sorted(set(range(max((n for n in numbers if isinstance(n, int)), default=-1) + 1)) - set(numbers))
        defects.append(f"sequence numbers not 0..{len(numbers) - 1}: duplicated {duplicated}, missing {missing}")
    if events and events[0]["type"] != "response.created":
        kinds = [f"{event.get('sequence_number')}:{event['type']}" for event in events[:6]]
        defects.append(f"first event {events[0]['type']} (of {len(events)}: {', '.join(kinds)})")
    terminals = [index for index, event in enumerate(events) if event["type"] in TERMINAL_EVENT_TYPES]
    if whole and (len(terminals) != 1 or terminals[0] != len(events) - 1):
        defects.append(f"terminal events at {terminals} of {len(events)}")
    if not whole and len(terminals) > 1:
        defects.append(f"{len(terminals)} terminal events")
    return defects


def differences(seen: dict[str, Any], final: dict[str, Any]) -> str:
    """Which fields of two Responses differ (with the statuses and output texts, the usual suspects)."""
    keys = sorted(key for key in set(seen) | set(final) if seen.get(key) != final.get(key))
    statuses = f"status {seen.get('status')} -> {final.get('status')}"
    return f"fields {keys}; {statuses}; text {_text(seen)!r} -> {_text(final)!r}"


def _text(response: dict[str, Any]) -> str:
    texts = [
        part.get("text", "")
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
    ]
    return "".join(texts)[:80]


class ClusterReader:
    """Reads the cluster once it is quiet: GETs through any node, the row and the Redis keys of a response."""

    def __init__(self, chaos: ChaosCluster) -> None:
        self.chaos = chaos
        self.http = httpx.Client(timeout=FINAL_READ_TIMEOUT_S)

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **params: str) -> httpx.Response | None:
        """The first answer that is not a 503 nor a refused connection, within FINAL_READ_TIMEOUT_S."""
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        while time.monotonic() < deadline:
            for base in self.chaos.bases:
                try:
                    reply = self.http.get(base + path, params=params)
                except httpx.HTTPError:
                    continue
                if reply.status_code != 503:
                    return reply
            time.sleep(0.5)
        return None

    def not_terminal(self) -> list[str]:
        return [str(row["id"]) for row in db_rows(self.chaos.postgres.url, NOT_TERMINAL_SQL)]

    def diagnose(self, response_id: str) -> str:
        """The row's job state, and where Redis holds its job (which queue, whose worker is alive)."""
        rows = db_rows(self.chaos.postgres.url, ROW_SQL, response_id)
        parts = [f"row {rows[0] if rows else None}"]
        try:
            with redis.Redis.from_url(self.chaos.redis_server.url, socket_timeout=5) as connection:
                queues = [
                    key.decode()
                    for key in connection.scan_iter(f"{QUEUE_NAME}*")
                    if connection.type(key) == b"zset" and connection.zscore(key, response_id) is not None
                ]
                alive = [member.decode() for member in connection.zrange(WORKERS_KEY, 0, -1)]
                job = bool(connection.exists(job_key_prefix + response_id))
                running = bool(connection.exists(in_progress_key_prefix + response_id))
            parts.append(f"redis: in queues {queues}, job key {job}, in-progress key {running}, workers {alive}")
        except redis.RedisError as error:
            parts.append(f"redis unreadable: {error}")
        return "; ".join(parts)


def response_violations(reader: ClusterReader, tracked: Tracked) -> list[Violation]:
    """Every invariant of one acknowledged response, against what GET and a replay return now."""
    found: list[Violation] = []

    def broken(invariant: str, detail: str) -> None:
        found.append(Violation(invariant, f"{tracked.op}: {detail}", tracked.response_id, tracked.created_s))

    reply = reader.get(f"/v1/responses/{tracked.response_id}")
    if reply is None or reply.status_code != 200 or reply.json().get("id") != tracked.response_id:
        broken("lost", f"GET answered {reply.status_code if reply else 'nothing'}: {reply.text[:300] if reply else ''}")
        return found
    final: dict[str, Any] = reply.json()
    if final["status"] not in TERMINAL_STATUSES:
        broken("not_terminal", f"{final['status']} after the quiet bound; {reader.diagnose(tracked.response_id)}")
        return found
    if tracked.background and final["status"] == "failed":
        broken("background_failed", f"error {final.get('error')}; {reader.diagnose(tracked.response_id)}")
    if tracked.reply is not None and not tracked.background and tracked.reply["status"] not in TERMINAL_STATUSES:
        broken("reply_not_terminal", f"answered {tracked.reply['status']}")
    if tracked.seen_terminal is not None and tracked.seen_terminal != final:
        broken("terminal_changed", differences(tracked.seen_terminal, final))
    if tracked.stream:
        whole = tracked.stream_end == "terminal"
        if tracked.stream_end in ("stalled", "unfinished"):
            broken("request_timed_out", f"its stream {tracked.stream_end} ({len(tracked.events)} events)")
        defects = stream_defects(tracked.events, whole=whole)
        if whole and tracked.events[-1]["response"] != final:
            defects.append("terminal event != GET: " + differences(tracked.events[-1]["response"], final))
        for defect in defects:
            broken("stream_not_exactly_once", defect)
    if tracked.background and tracked.stream:
        found += _replay_violations(reader, tracked, final)
    found += cancel_violations(tracked, final)
    if tracked.asked_previous is not None:
        named = {(tracked.reply or {}).get("previous_response_id"), final.get("previous_response_id")}
        if named != {tracked.asked_previous}:
            broken("chain_previous", f"asked to continue {tracked.asked_previous}, names {named}")
    return found


def _replay_violations(reader: ClusterReader, tracked: Tracked, final: dict[str, Any]) -> list[Violation]:
    def broken(detail: str) -> Violation:
        return Violation("replay_not_exactly_once", f"{tracked.op}: {detail}", tracked.response_id, tracked.created_s)

    replay = reader.get(f"/v1/responses/{tracked.response_id}", stream="true")
    if replay is None or replay.status_code != 200:
        return [broken(f"replay answered {replay.status_code if replay else 'nothing'}")]
    try:
        events = parse_sse(replay.text)
    except (ValueError, KeyError) as error:
        return [broken(f"unreadable replay: {error!r}")]
    found = [broken(defect) for defect in stream_defects(events, whole=True)]
    if events and events[-1].get("response") != final:
        found.append(broken("terminal event != GET: " + differences(events[-1].get("response") or {}, final)))
    if tracked.stream_end == "terminal" and events != tracked.events:
        pairs = enumerate(zip(events, tracked.events, strict=False))
        first = next(((index, stored, live) for index, (stored, live) in pairs if stored != live), None)
        detail = f"replay ({len(events)} events) != what its client saw ({len(tracked.events)})"
        if first is not None:
            index, stored, live = first
            detail += f"; first at {index}: replay {_short(stored)} vs client {_short(live)}"
        found.append(broken(detail))
    return found


def _short(event: dict[str, Any]) -> str:
    """An event for a report line: its fields but the (long) response."""
    shown = {key: value for key, value in event.items() if key != "response"}
    if "response" in event:
        shown["response.status"] = event["response"].get("status")
    return json.dumps(shown)[:300]


def cancel_violations(tracked: Tracked, final: dict[str, Any]) -> list[Violation]:
    if tracked.op != "cancel":
        return []

    def lost(detail: str) -> list[Violation]:
        return [Violation("cancel_lost", detail, tracked.response_id, tracked.created_s)]

    if not tracked.cancel_answered:
        return lost("the cancel was never acknowledged (429/503 or no answer until the bound)")
    answered = tracked.cancel_reply or {}
    if tracked.cancel_status == 200:
        said = answered.get("status")
        if said in ("cancelled", "queued", "in_progress") and final["status"] != "cancelled":
            return lost(f"the cancel answered {said}; the response ended {final['status']}")
        if said in TERMINAL_STATUSES and answered != final:
            return lost(f"the cancel answered {said}, GET differs: {differences(answered, final)}")
        return []
    if tracked.cancel_status == 400 and final["status"] in ("completed", "incomplete", "failed"):
        return []  # it had ended before the cancel came
    return lost(f"the cancel answered {tracked.cancel_status} {answered}; the response ended {final['status']}")


class TakeoverWatch:
    """While the load runs: a response released for a takeover (in progress in the database, nobody's lease)
    that GET still calls in_progress, checked twice around the GET so that a claim in between does not count."""

    def __init__(self, chaos: ChaosCluster, clock: Clock, interval_s: float = 0.5) -> None:
        self.chaos = chaos
        self.clock = clock
        self.interval_s = interval_s
        self.violations: list[Violation] = []
        self._reported: set[str] = set()

    def _waiting(self, response_id: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT id, attempts FROM responses WHERE status = 'in_progress' AND lease_owner IS NULL"
        if response_id is None:
            return db_rows(self.chaos.postgres.url, query)
        return db_rows(self.chaos.postgres.url, query + " AND id = $1", response_id)

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.wait(self.interval_s):
                try:
                    self._look(http)
                except Exception:  # Postgres or a node is down (a fault): looked at again next time
                    continue

    def _look(self, http: httpx.Client) -> None:
        for row in self._waiting():
            response_id = str(row["id"])
            if response_id in self._reported:
                continue
            status = http.get(f"{self.chaos.bases[0]}/v1/responses/{response_id}").json().get("status")
            again = self._waiting(response_id)
            if status == "in_progress" and again and again[0]["attempts"] == row["attempts"]:
                self._reported.add(response_id)
                detail = f"GET says in_progress while its job waits for a takeover (attempt {row['attempts']} ended)"
                self.violations.append(Violation("waiting_reads_in_progress", detail, response_id, self.clock.now_s()))
