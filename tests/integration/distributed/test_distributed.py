"""Distributed mode for real: two API nodes and arq workers on Postgres and Redis, the real model, the SDK."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import httpx
import openai
import pytest
import redis
from openai.types.responses.response_input_item_param import ItemReference

from app.config import Settings
from app.generation.job import GenerationJob
from app.generation.types import SamplingParams
from app.tenants.identity import OPEN_TENANT
from app.testing.databases import count_responses
from app.testing.servers import RedisServer, ServerProcess, wait_until_ready
from app.testing.sse import parse_sse
from app.transport.redis_queue import ArqQueue, affinity_owner_key, model_queue, register_worker, worker_queue
from tests.integration.distributed.cluster import Cluster, model_of, poll, poll_until
from tests.protocol import (
    LONG_COUNT,
    SOCKET_EVENT,
    STEERED_CAP,
    assert_exact_response,
    assert_well_formed_stream,
    socket_exchange,
    steered_exchange,
)

pytestmark = pytest.mark.integration

STORY = "Write a long story about a dragon who learns to bake bread."
#: Crash recovery must settle a response within this (the issue's bound).
RECOVERY_BOUND_S = 30


def test_background_create_then_poll_from_another_node(cluster: Cluster) -> None:
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    created = a.responses.create(model=model_of(a), input="What is 2+2?", background=True, temperature=0)
    assert created.status == "queued" and created.background is True
    done = poll(b, created.id)
    assert done.status == "completed" and done.completed_at is not None and done.output_text
    assert a.responses.retrieve(created.id).model_dump() == done.model_dump()


def test_foreground_requests_run_on_a_worker(cluster: Cluster) -> None:
    b = cluster.client(cluster.api_b)
    model = model_of(b)
    plain = b.responses.create(model=model, input="What is 2+2?", temperature=0, max_output_tokens=32)
    assert plain.status == "completed" and plain.output_text
    with b.responses.stream(model=model, input="Say hello.", temperature=0, max_output_tokens=64) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
        final = stream.get_final_response()
    assert assert_well_formed_stream(events)["id"] == final.id
    chained = b.responses.create(model=model, input="Again.", previous_response_id=final.id, max_output_tokens=16)
    assert chained.usage is not None and final.usage is not None
    assert chained.usage.input_tokens > final.usage.input_tokens
    unstored = b.responses.create(model=model, input="What is 2+2?", store=False, max_output_tokens=16)
    assert unstored.output_text
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(unstored.id)


def test_a_client_dropping_a_foreground_stream_cancels_its_job(cluster: Cluster) -> None:
    body = {"input": STORY, "stream": True, "max_output_tokens": 4000, "temperature": 0.8}
    response_id = None
    with httpx.stream("POST", f"{cluster.api_b.base_url}/v1/responses", json=body, timeout=60) as stream:
        for line in stream.iter_lines():
            if response_id is None and line.startswith("data: {"):
                response_id = json.loads(line[6:])["response"]["id"]
            if "response.output_text.delta" in line:
                break
    assert response_id is not None
    settled = poll(cluster.client(cluster.api_a), response_id, timeout_s=30)
    assert settled.status == "cancelled"
    assert settled.usage is not None and settled.usage.output_tokens < 4000


def test_counts_logprobs_and_websocket_mode_across_nodes(cluster: Cluster) -> None:
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    model = model_of(a)
    body = {"model": model, "input": "Name a colour.", "instructions": "Be brief."}
    counted = a.responses.input_tokens.count(**body)  # an API node renders the prompt; no worker involved
    made = b.responses.create(
        **body, temperature=0, max_output_tokens=16, include=["message.output_text.logprobs"], top_logprobs=1
    )
    assert made.usage is not None and counted.input_tokens == made.usage.input_tokens
    part = made.output[0].content[0]
    assert part.logprobs and "".join(token.token for token in part.logprobs) == part.text
    assert_exact_response(a.responses.retrieve(made.id).model_dump(mode="json"))

    def run(connection: object, **fields: object) -> list[dict]:
        return socket_exchange(connection, model=model, temperature=0, max_output_tokens=16, **fields)

    with b.responses.connect() as connection:
        first = assert_well_formed_stream(run(connection, input="My name is Ada.", store=False), union=SOCKET_EVENT)
        second = assert_well_formed_stream(
            run(connection, input="What is my name?", store=False, previous_response_id=first["id"]),
            union=SOCKET_EVENT,
        )
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    with a.responses.connect() as other:  # another connection, another node: it was never stored
        elsewhere = run(other, input="x", store=False, previous_response_id=second["id"])
        assert elsewhere[0]["error"]["code"] == "previous_response_not_found"
    # A client that closes its socket cancels its running response on the worker.
    with b.responses.connect() as connection:
        connection.response.create(model=model, input=STORY, max_output_tokens=4000, temperature=0.8)
        response_id = None
        for event in connection:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break
    assert response_id is not None
    settled = poll(a, response_id, timeout_s=30)
    assert settled.status == "cancelled", settled.status
    assert settled.usage is not None and settled.usage.output_tokens < 4000


def test_a_websocket_warm_up_runs_on_the_worker_that_then_serves_its_chain(cluster: Cluster) -> None:
    client = cluster.client(cluster.api_b)
    model = model_of(client)
    rules = " ".join(f"Rule {number}: keep the gate number {number} shut at night." for number in range(24))
    with client.responses.connect() as connection:
        fields = {"model": model, "instructions": "You guard a castle.", "store": False}
        warm = assert_well_formed_stream(
            socket_exchange(connection, input=rules, generate=False, **fields), union=SOCKET_EVENT
        )
        assert warm["status"] == "completed" and warm["output"] == [] and warm["usage"]["output_tokens"] == 0
        turn = assert_well_formed_stream(
            socket_exchange(
                connection,
                input="Which gate is first?",
                previous_response_id=warm["id"],
                temperature=0,
                max_output_tokens=16,
                **fields,
            ),
            union=SOCKET_EVENT,
        )
    # The chain's affinity sent the turn to the worker whose cache the warm-up filled: all of the warm-up's
    # prompt but the assistant turn's opening (3 tokens here), where the turn has its new input.
    assert turn["usage"]["input_tokens_details"]["cached_tokens"] >= warm["usage"]["input_tokens"] - 3


def test_a_steer_stops_the_response_on_its_worker_and_a_successor_follows(cluster: Cluster) -> None:
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    fields = {"model": model_of(b), "temperature": 0, "max_output_tokens": STEERED_CAP}
    with b.responses.connect() as connection:  # stored, signalled to the worker that runs it, as a cancel is
        steering, steered, successor = steered_exchange(
            connection, "Stop. Just say the word OK.", input=LONG_COUNT, **fields
        )
    assert [event.type for event in steering] == ["response.steer.accepted"]
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    assert steered["usage"]["output_tokens"] < STEERED_CAP
    assert successor["previous_response_id"] == steered["id"] and successor["max_output_tokens"] == STEERED_CAP
    assert a.responses.retrieve(steered["id"]).incomplete_details.reason == "steered"  # type: ignore[union-attr]


def test_cancel_stops_the_worker_within_about_a_token(cluster: Cluster) -> None:
    a = cluster.client(cluster.api_a)
    created = a.responses.create(
        model=model_of(a), input=STORY, background=True, max_output_tokens=4000, temperature=0.8
    )
    deadline = time.monotonic() + 30
    while a.responses.retrieve(created.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # let it generate for a while
    started = time.monotonic()
    cancelled = a.responses.cancel(created.id)
    cancel_s = time.monotonic() - started
    assert cancelled.status == "cancelled"
    assert cancelled.usage is not None and 0 < cancelled.usage.output_tokens < 4000
    print(f"\ncancel latency (POST /cancel until the worker stored its stop): {cancel_s * 1000:.0f} ms")
    time.sleep(1)
    after = a.responses.retrieve(created.id)
    assert after.model_dump() == cancelled.model_dump(), "the output grew after cancel"
    assert a.responses.cancel(created.id).model_dump() == cancelled.model_dump()
    # The worker is free at once for the next job.
    assert a.responses.create(model=model_of(a), input="Hi!", max_output_tokens=16).output_text


def test_a_chain_follows_the_worker_that_holds_its_prefix(cluster: Cluster) -> None:
    # Two workers of one sequence each. The chain's owner is kept busy when the next turn comes: without
    # affinity the idle worker would take that turn from the shared queue and read its prompt in full.
    cluster.worker.stop()
    env = {**cluster.env(), "RESPONSES_WORKER_CONCURRENCY": "1"}
    workers = [ServerProcess(env, cluster.logs / f"single-{index}.log", command=["worker"]).start() for index in (1, 2)]
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    model = model_of(a)
    try:
        with redis.Redis.from_url(cluster.redis_url) as connection:
            deadline = time.monotonic() + 60
            while connection.zcount("llama-responses:workers", time.time(), "+inf") < 2:
                assert time.monotonic() < deadline, "the workers did not come up"
                time.sleep(0.2)
            first = a.responses.create(model=model, input="Name a fruit.", temperature=0, max_output_tokens=16)
            owner = connection.get(affinity_owner_key(OPEN_TENANT, model, first.id))
            assert owner is not None and connection.zscore("llama-responses:workers", owner.decode()) is not None
        # A long job of the same chain goes to the owner and occupies it (at temperature 0 this story runs all
        # 4,000 tokens: at 1 it sometimes ended before the cancel below, which then found it completed)...
        busy = b.responses.create(
            model=model,
            input=STORY,
            previous_response_id=first.id,
            background=True,
            max_output_tokens=4000,
            temperature=0,
        )
        assert poll_until(a, busy.id, "in_progress").status == "in_progress"
        # ...so the next turn waits in the owner's own queue rather than going to the idle worker.
        second = b.responses.create(
            model=model,
            input="What colour is it?",
            previous_response_id=first.id,
            background=True,
            temperature=0,
            max_output_tokens=16,
        )
        time.sleep(0.5)
        assert a.responses.retrieve(second.id).status == "queued"
        a.responses.cancel(busy.id)
        done = poll(a, second.id)
        assert done.status in ("completed", "incomplete") and done.usage is not None and first.usage is not None
        assert done.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    finally:
        for worker in workers:
            worker.stop()
        cluster.worker = cluster.new_worker("worker-after-affinity")


async def test_affinity_never_sends_a_job_where_another_tenants_key_points() -> None:
    # A private Redis: the cluster's worker would take whatever reached the shared one's queue.
    private = RedisServer().start()
    queue = await ArqQueue.connect(Settings(redis_url=private.url, _env_file=None))
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_output_tokens=16)
    try:
        await register_worker(queue.pool, "worker_alpha", ["m"], 60)
        await queue.pool.set(affinity_owner_key("key:alpha", "m", "shared"), "worker_alpha", ex=60)
        for tenant in ("key:alpha", "key:beta"):
            job_id = f"resp_{tenant[4:]}"
            job = GenerationJob(
                job_id, [1], sampling, {}, False, False, tenant=tenant, model="m", affinity_key="shared"
            )
            await queue.enqueue(job)
        assert await queue.pool.zscore(worker_queue("worker_alpha"), "resp_alpha") is not None
        assert await queue.pool.zscore(worker_queue("worker_alpha"), "resp_beta") is None
        assert await queue.pool.zscore(model_queue("m"), "resp_beta") is not None
    finally:
        await queue.close()
        private.stop()


def test_conversation_turns_and_compaction_across_nodes(cluster: Cluster) -> None:
    wait_until_ready(cluster.api_a.base_url)  # an earlier test may have just replaced the worker
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    model = model_of(a)
    conversation = a.conversations.create(items=[{"role": "user", "content": "Let us talk about fruit."}])
    turns = [
        node.responses.create(
            model=model, input=question, conversation=conversation.id, temperature=0, max_output_tokens=16
        )
        for node, question in ((a, "Name a fruit."), (b, "What colour is it?"), (a, "Where does it grow?"))
    ]
    for previous, turn in itertools.pairwise(turns):
        assert previous.usage is not None and turn.usage is not None
        # The conversation is the affinity key: each turn goes back to the worker holding its prefix.
        assert turn.usage.input_tokens_details.cached_tokens >= previous.usage.input_tokens
    with redis.Redis.from_url(cluster.redis_url) as connection:
        assert connection.get(affinity_owner_key(OPEN_TENANT, model, conversation.id)) is not None
    items = list(b.conversations.items.list(conversation.id, order="asc"))
    assert len(items) == 7 and items[-1].id == turns[-1].output[0].id

    # Compaction runs on the worker; the item one node seals, another opens (one key, kept in the database).
    compacted = b.responses.compact(
        model=model, input=[ItemReference(type="item_reference", id=str(item.id)) for item in items]
    )
    assert compacted.output[-1].type == "compaction" and len(compacted.output) == 5
    history = [entry.model_dump(exclude_none=True, warnings=False) for entry in compacted.output]
    later = a.responses.create(
        model=model, input=[*history, {"role": "user", "content": "Which fruit?"}], max_output_tokens=16
    )
    assert later.status in ("completed", "incomplete")


def test_a_compaction_trigger_on_a_worker(cluster: Cluster) -> None:
    a, b = cluster.client(cluster.api_a), cluster.client(cluster.api_b)
    first = a.responses.create(model=model_of(a), input="My name is Ada.", temperature=0, max_output_tokens=16)
    trigger = {"type": "compaction_trigger"}
    with b.responses.stream(
        model=model_of(b), input=[trigger], previous_response_id=first.id, temperature=0, max_output_tokens=16
    ) as stream:
        events = [event.model_dump(warnings=False) for event in stream]
    final = assert_well_formed_stream(events)
    compacting = [event for event in events if event["type"] == "response.compaction.compacting"]
    assert [event["item_id"] for event in compacting] == [final["output"][0]["id"]]
    assert [item.type for item in a.responses.retrieve(final["id"]).output][:2] == ["compaction", "message"]


def test_stream_resumes_on_another_node_after_its_node_dies(cluster: Cluster, tmp_path: Path) -> None:
    doomed_api = ServerProcess(cluster.env(), tmp_path / "doomed_api.log").start()
    body = {"input": STORY, "background": True, "stream": True, "max_output_tokens": 60, "temperature": 0}
    seen: list[dict] = []
    try:
        with httpx.stream("POST", f"{doomed_api.base_url}/v1/responses", json=body, timeout=60) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: {"):
                    seen.append(json.loads(line[6:]))
                if len(seen) == 6:
                    doomed_api.kill()  # the node dies under its client; the background response goes on
                    break
    except httpx.HTTPError:
        pass
    finally:
        doomed_api.kill()
    response_id = seen[0]["response"]["id"]
    last = seen[-1]["sequence_number"]
    resumed = httpx.get(
        f"{cluster.api_b.base_url}/v1/responses/{response_id}",
        params={"stream": "true", "starting_after": last},
        timeout=60,
    )
    rest = parse_sse(resumed.text)
    assert rest[0]["sequence_number"] == last + 1
    final = assert_well_formed_stream(seen + rest)
    replayed = parse_sse(
        httpx.get(f"{cluster.api_b.base_url}/v1/responses/{response_id}", params={"stream": "true"}, timeout=60).text
    )
    assert replayed == seen + rest
    assert httpx.get(f"{cluster.api_a.base_url}/v1/responses/{response_id}").json() == final


def test_a_worker_killed_mid_job_is_taken_over_in_time(cluster: Cluster) -> None:
    a = cluster.client(cluster.api_a)
    # Short leases, so that the takeover (not the lease) is what this measures; the defaults add ~15 s.
    fast = {"RESPONSES_LEASE_S": "3", "RESPONSES_RECONCILE_INTERVAL_S": "1"}
    doomed = cluster.new_worker("doomed", **fast)
    try:
        cluster.worker.kill()  # only the doomed worker is left to take the job
        wait_until_ready(cluster.api_a.base_url)
        created = a.responses.create(
            model=model_of(a), input=STORY, background=True, max_output_tokens=48, temperature=0
        )
        deadline = time.monotonic() + 30
        while a.responses.retrieve(created.id).status != "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
        doomed.kill()
        killed_at = time.monotonic()
        cluster.worker = cluster.new_worker("worker-2", **fast)
        settled = poll(a, created.id, timeout_s=RECOVERY_BOUND_S + 10)
        recovery_s = time.monotonic() - killed_at
        print(f"\nworker SIGKILL -> response taken over and {settled.status} in {recovery_s:.1f} s")
        # Its lease expires, the new worker's reconciliation enqueues it again and it continues.
        assert settled.status in ("completed", "incomplete") and settled.error is None, settled.error
        assert recovery_s <= RECOVERY_BOUND_S
    finally:
        doomed.kill()


def test_jobs_lost_with_redis_are_enqueued_again(cluster: Cluster, tmp_path: Path) -> None:
    private = RedisServer().start()
    env = {"RESPONSES_DATABASE_URL": cluster.database_url, "RESPONSES_REDIS_URL": private.url}
    api = ServerProcess(env, tmp_path / "api.log").start()
    worker: ServerProcess | None = None
    try:
        client = cluster.client(api)
        queued = [
            client.responses.create(model=model_of(client), input="Hi!", background=True, max_output_tokens=16)
            for _ in range(2)
        ]
        private.stop()  # no worker has taken them; Redis goes, and its jobs with it
        stored_before = count_responses(cluster.database_url)
        with pytest.raises(openai.APIStatusError) as down:
            client.responses.create(model=model_of(client), input="Hi!", background=True)
        assert down.value.status_code == 503
        assert count_responses(cluster.database_url) == stored_before, "a create that failed left a row behind"
        private.start()
        restarted_at = time.monotonic()
        worker = ServerProcess(env, tmp_path / "worker.log", command=["worker"]).start()
        for response in queued:
            done = poll(client, response.id, timeout_s=RECOVERY_BOUND_S + 10)
            assert done.status in ("completed", "incomplete"), done.status
        print(f"\nRedis restart -> queued jobs re-enqueued and completed in {time.monotonic() - restarted_at:.1f} s")
    finally:
        for process in (worker, api):
            if process is not None:
                process.stop()
        private.stop()


def test_the_list_on_any_node_and_a_workers_retention_job(cluster: Cluster, tmp_path: Path) -> None:
    """GET /v1/responses answers the same on every node; a worker's retention cron job (run as it starts, then
    every 10 minutes) purges what expired. Last in this module: it purges the earlier tests' responses too."""
    client = cluster.client(cluster.api_a)
    made = client.responses.create(
        model=model_of(client), input="Say hi.", max_output_tokens=16, metadata={"test": "retention"}
    )
    for node in (cluster.api_a, cluster.api_b):
        listed = httpx.get(f"{node.base_url}/v1/responses", params={"metadata[test]": "retention"}, timeout=30)
        assert [response["id"] for response in listed.json()["data"]] == [made.id]
    # Its own Redis: arq hands a cron job to whichever worker polls first, and the cluster's workers keep the
    # default retention (a deployment gives every worker the same settings).
    private = RedisServer().start()
    env = {
        "RESPONSES_DATABASE_URL": cluster.database_url,
        "RESPONSES_REDIS_URL": private.url,
        "RESPONSES_RETENTION_DAYS": "0.000006",  # about half a second
    }
    worker = ServerProcess(env, tmp_path / "worker.log", command=["worker"]).start()
    try:
        deadline = time.monotonic() + RECOVERY_BOUND_S * 2
        while time.monotonic() < deadline:
            try:
                client.responses.retrieve(made.id)
            except openai.NotFoundError:
                break
            time.sleep(0.2)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(made.id)
    finally:
        worker.stop()
        private.stop()
