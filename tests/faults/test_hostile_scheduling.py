"""A tenant that floods interactive creates against real server processes and the real model, both modes: another
tenant's background responses keep their share of the turns (issue 37: six loops of tenant X's short foreground
creates left tenant Y's four background responses at 0 done in 101 s, 4 in 3 s alone, because class order came
before every share). Counted against X's completions, never timed: by the time X has had FLOOD_CREATES more creates
answered, Y's background work must have had at least half of its turns (at equal weights, every other one)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import openai
import pytest

from app.testing.cluster import Cluster, ServerProcess
from app.testing.databases import sqlite_url
from app.testing.servers import sdk_client

TENANTS = {"RESPONSES_API_KEYS": "flood-key,background-key"}
LOOPS = 6
#: X's creates answered after Y queued its work: each of Y's turns comes after about one of X's at equal weights.
FLOOD_CREATES = 12
BACKGROUND = 4
BOUND_S = 300

pytestmark = pytest.mark.integration


class Flood:
    """LOOPS threads of one tenant's short foreground creates, each sent as soon as the last is answered."""

    def __init__(self, client: openai.OpenAI, model: str) -> None:
        self.client, self.model = client, model
        self.answered = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(LOOPS)]

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.client.responses.create(
                model=self.model, input="Say hi.", max_output_tokens=16, temperature=0, store=False
            )
            with self.lock:
                self.answered += 1

    def wait_for(self, answered: int) -> int:
        deadline = time.monotonic() + BOUND_S
        while self.answered < answered and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.answered

    def __enter__(self) -> Flood:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(BOUND_S)


def background_beside_a_flood(server: ServerProcess) -> None:
    # A create may wait long on a loaded machine (several loops' generations share two cores): the SDK's timeout
    # is BOUND_S, not sdk_client's 120 s, so that only a starved request, not a slow one, ends the test.
    flood_client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="flood-key", max_retries=0, timeout=BOUND_S)
    with flood_client as x, sdk_client(server.base_url, "background-key") as y:
        model = x.models.list().data[0].id
        with Flood(x, model) as flood:
            assert flood.wait_for(LOOPS) >= LOOPS  # every loop has had a create answered: the flood is on
            ids = [
                y.responses.create(
                    model=model, input=f"Count to {index + 3}.", background=True, max_output_tokens=16, temperature=0
                ).id
                for index in range(BACKGROUND)
            ]
            start = flood.answered
            assert flood.wait_for(start + FLOOD_CREATES) >= start + FLOOD_CREATES
            statuses = [y.responses.retrieve(response_id).status for response_id in ids]
        ended = sum(status in ("completed", "incomplete") for status in statuses)  # incomplete: its 16 tokens
        assert ended >= BACKGROUND // 2, (
            f"{statuses} after {FLOOD_CREATES} of the flood's creates: its background work was starved"
        )


def test_embedded_background_work_keeps_its_share_beside_another_tenants_flood(tmp_path: Path) -> None:
    server = ServerProcess({"RESPONSES_DATABASE_URL": sqlite_url(tmp_path), **TENANTS}, tmp_path / "server.log")
    try:
        server.start()
        background_beside_a_flood(server)
    finally:
        server.stop()


def test_distributed_background_work_keeps_its_share_beside_another_tenants_flood(
    cluster: Cluster, workers: list[ServerProcess]
) -> None:
    workers.append(cluster.worker())
    node = cluster.api(**TENANTS)
    try:
        cluster.wait_ready(node)
        background_beside_a_flood(node)
    finally:
        node.stop()
