"""Restarts and gray failures with real processes, the real model, a private Postgres and Redis: a chain whose
worker and API node were killed answers once they are back (no job stranded in a dead worker's own queue); a
response waiting for a takeover reads `queued`; a worker frozen past its lease (SIGSTOP) writes nothing for a job
claimed again meanwhile, even by itself; a worker told to stop (SIGTERM, a deploy) drains: its foreground
responses finish, its background ones are handed over, none ends `incomplete` or `failed`.

The processes run with a 3 s lease and a 1 s reconciliation interval, so takeovers happen within seconds.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from app.testing.cluster import STORY, Cluster, ServerProcess, StreamReader, sigkill, wait_for_status, worker_id
from tests.faults.checks import deltas, row, start_worker, stored_events
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

FAST_LEASES = {"RESPONSES_LEASE_S": "3", "RESPONSES_RECONCILE_INTERVAL_S": "1", "RESPONSES_WORKER_CONCURRENCY": "4"}
BACKGROUND_STREAM = {"input": "Tell me a story.", "background": True, "stream": True, "max_output_tokens": 48}
#: How long a client may wait for an answer that a restart delayed: a lease (3 s), a reconciliation round, the
#: freshness window of a heartbeat (5 s), a model load, and the generation on a busy 2-core machine. Today's
#: main never answered at all (the job waited in the dead worker's own queue).
ANSWER_BOUND_S = 90
#: Two foreground streams finishing and two background ones continuing elsewhere, on a loaded 2-core machine.
DRAIN_ANSWER_BOUND_S = 300


@pytest.fixture(scope="module", autouse=True)
def fast_leases(cluster: Cluster) -> None:
    cluster.extra_env.update(FAST_LEASES)


def create(api: ServerProcess, body: dict[str, Any], timeout_s: float = ANSWER_BOUND_S) -> dict[str, Any]:
    answer = httpx.post(f"{api.base_url}/v1/responses", json=body, timeout=timeout_s)
    assert answer.status_code == 200, answer.text
    created: dict[str, Any] = answer.json()
    return created


def assert_ended_on_its_own(final: dict[str, Any]) -> None:
    """Completed, or cut by its own `max_output_tokens`: never by a fault."""
    assert final["status"] in ("completed", "incomplete"), final
    if final["status"] == "incomplete":
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}, final


def test_a_chain_answers_after_its_worker_and_api_node_were_killed_and_restarted(
    cluster: Cluster, workers: list[ServerProcess]
) -> None:
    api = cluster.api("chain-api")
    worker = start_worker(cluster, workers, api)
    turn = {"max_output_tokens": 16, "temperature": 0}
    first = create(api, {**turn, "input": "Say one word."})
    second = create(api, {**turn, "input": "Another word.", "previous_response_id": first["id"]})
    sigkill(api)
    api = cluster.api("chain-api-restarted")
    # The third turn comes a moment after the chain's worker died: affinity still names it as the chain's home,
    # its registration has not expired (and its last heartbeat may look fresh), so the job can be sent to its
    # own queue, where no one will ever take it, before a new worker (under a new id) starts.
    sigkill(worker)
    with ThreadPoolExecutor(1) as pool:
        third = pool.submit(create, api, {**turn, "input": "A third word.", "previous_response_id": second["id"]})
        start_worker(cluster, workers, api)
        answered = third.result(timeout=ANSWER_BOUND_S)
    assert answered["status"] == "completed" and answered["previous_response_id"] == second["id"], answered
    api.stop()


def stream_on_its_only_worker(
    cluster: Cluster, workers: list[ServerProcess], name: str, body: dict[str, Any]
) -> tuple[ServerProcess, ServerProcess, StreamReader, str]:
    """An API node and one worker, and a background stream on it that has said some text: (api, worker, reader,
    response id)."""
    api = cluster.api(name)
    only = start_worker(cluster, workers, api)
    reader = StreamReader("POST", f"{api.base_url}/v1/responses", body)
    assert reader.wait_for(lambda events: deltas(events) >= 3, timeout_s=90), reader.events
    response_id = reader.response_id
    assert response_id is not None
    return api, only, reader, response_id


def test_a_background_response_whose_only_worker_died_reads_queued_until_a_worker_takes_it_over(
    cluster: Cluster, workers: list[ServerProcess]
) -> None:
    body = {**BACKGROUND_STREAM, "temperature": 0}
    api, only, reader, response_id = stream_on_its_only_worker(cluster, workers, "queued-api", body)
    sigkill(only)
    # Lease (3 s) + a reconciliation round (1 s, on the API node): nothing generates it, and GET says so.
    waiting = wait_for_status(api.base_url, response_id, {"queued"}, timeout_s=30)
    assert waiting.get("status") == "queued", waiting
    time.sleep(2)
    assert httpx.get(f"{api.base_url}/v1/responses/{response_id}").json()["status"] == "queued"
    start_worker(cluster, workers, api)
    assert wait_for_status(api.base_url, response_id, {"in_progress", "completed"}, 90).get("status")
    reader.join(ANSWER_BOUND_S)
    final = assert_well_formed_stream(reader.events)
    assert_ended_on_its_own(final)
    assert httpx.get(f"{api.base_url}/v1/responses/{response_id}").json() == final
    assert row(cluster, response_id)["attempts"] == 2
    api.stop()


def test_a_worker_frozen_past_its_lease_writes_nothing_after_its_job_was_claimed_again(
    cluster: Cluster, workers: list[ServerProcess]
) -> None:
    body = {**BACKGROUND_STREAM, "max_output_tokens": 64, "temperature": 0}
    api, only, reader, response_id = stream_on_its_only_worker(cluster, workers, "frozen-api", body)
    assert only.process is not None
    # A VM stall: the lease (3 s) expires, the API node's reconciler releases the job and enqueues it again, and
    # the same process claims it when it wakes, beside its own run of it, which wakes too.
    only.process.send_signal(signal.SIGSTOP)
    try:
        assert wait_for_status(api.base_url, response_id, {"queued"}, timeout_s=30).get("status") == "queued"
    finally:
        only.process.send_signal(signal.SIGCONT)
    reader.join(ANSWER_BOUND_S)
    assert reader.done and reader.error is None, reader.error
    final = assert_well_formed_stream(reader.events)  # exactly once: the old run sent nothing after the claim
    assert_ended_on_its_own(final)
    assert httpx.get(f"{api.base_url}/v1/responses/{response_id}").json() == final
    assert stored_events(api, response_id) == reader.events
    held = row(cluster, response_id)
    assert held["attempts"] == 2 and held["job_dropped"] and held["progress_dropped"], held
    api.stop()


def test_a_worker_told_to_stop_drains_and_no_response_ends_incomplete(
    cluster: Cluster, workers: list[ServerProcess]
) -> None:
    api = cluster.api("drain-api")
    # A drain as long as a loaded 2-core machine needs to finish two foreground streams (the default is 25 s).
    leaving = start_worker(cluster, workers, api, RESPONSES_WORKER_DRAIN_S="120")
    foreground = {"input": STORY, "stream": True, "max_output_tokens": 32, "temperature": 0}
    background = {**foreground, "background": True, "max_output_tokens": 200}
    readers = [StreamReader("POST", f"{api.base_url}/v1/responses", body) for body in [foreground] * 2]
    handed = [StreamReader("POST", f"{api.base_url}/v1/responses", body) for body in [background] * 2]
    for reader in [*readers, *handed]:
        assert reader.wait_for(lambda events: deltas(events) >= 2, timeout_s=90), reader.events
    staying = cluster.worker()
    workers.append(staying)
    worker_id(staying)  # ready: its model is loaded
    assert leaving.process is not None
    running = [reader for reader in handed if reader.alive]
    assert running, "both background streams ended before the stop: nothing to hand over"
    told = time.monotonic()
    leaving.process.send_signal(signal.SIGTERM)
    leaving.process.wait(timeout=150)
    drained_s = time.monotonic() - told
    for reader in [*readers, *handed]:
        reader.join(DRAIN_ANSWER_BOUND_S)
        assert reader.done and reader.error is None, reader.error
        final = assert_well_formed_stream(reader.events)
        assert_ended_on_its_own(final)
        assert httpx.get(f"{api.base_url}/v1/responses/{final['id']}").json() == final
    for reader in running:
        assert reader.response_id is not None and row(cluster, reader.response_id)["attempts"] == 2
    log = leaving.log_path.read_text(errors="replace")
    assert "drained in" in log and f"{len(running)} handed over" in log and " 0 cut" in log, log[-2000:]
    print(f"\nworker SIGTERM under load: drained and exited in {drained_s:.1f} s")
    api.stop()
