"""A hostile tenant against real server processes, both modes: its webhook receivers that never answer hold only
its own delivery slots, so that another tenant's event is delivered while every one of its requests is still held
(before, a delivery round took 16 due deliveries and waited for all of them: another tenant's delivery came 27.3 s
late on SQLite, 9.5 s on Postgres). The events are written into the outbox directly (as a response's end writes
them), so that no model runs: what is under test is the server's delivery loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest

from app.db.session import Database
from app.testing.cluster import Cluster
from app.testing.databases import sqlite_url
from app.testing.receiver import Receiver, running_receiver
from app.testing.servers import ServerProcess, sdk_client
from app.webhooks import repository
from app.webhooks.outbox import record_event

pytestmark = pytest.mark.integration

HOSTILE = {
    "RESPONSES_API_KEYS": "hostile-key,other-key",
    "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
    "RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "0.2",
    "RESPONSES_WEBHOOK_TIMEOUT_S": "60",
    "RESPONSES_WEBHOOK_MAX_ENDPOINTS_PER_TENANT": "48",
    "RESPONSES_WEBHOOK_MAX_IN_FLIGHT_PER_TENANT": "4",
}
#: The hostile tenant's endpoints, all at one receiver that never answers (48 in the round that found it).
HANGING = 20
BOUND_S = 60


def wait_for(receiver: Receiver, count: int) -> int:
    deadline = time.monotonic() + BOUND_S
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(receiver.requests)


async def record(database_url: str, endpoint_id: str, object_id: str) -> None:
    """The event a response of the endpoint's tenant would write at its end."""
    database = Database.connect(database_url)
    try:
        async with database.transaction() as session:
            [endpoint] = (await repository.endpoints_by_id(session, [endpoint_id])).values()
            await record_event(session, tenant=endpoint.tenant, event_type="response.completed", object_id=object_id)
    finally:
        await database.dispose()


def hanging_tenant_beside_another(server: ServerProcess, database_url: str) -> None:
    with (
        running_receiver() as hanging,
        running_receiver() as answering,
        sdk_client(server.base_url, "hostile-key") as hostile,
        sdk_client(server.base_url, "other-key") as other,
    ):
        hanging.hold_next, hanging.hold_s = 10_000, 300
        try:
            made = [
                hostile.webhooks.create(name=f"h{index}", url=hanging.url, event_types=["response.completed"])
                for index in range(HANGING)
            ]
            theirs = other.webhooks.create(name="o", url=answering.url, event_types=["response.completed"])
            asyncio.run(record(database_url, made[0].id, "resp_hostile"))
            assert wait_for(hanging, 4) == 4
            asyncio.run(record(database_url, theirs.id, "resp_other"))
            assert wait_for(answering, 1) == 1, "the other tenant's delivery waited behind the hanging receivers"
            assert len(hanging.requests) == 4 and not hanging.released.is_set()  # still held, and only 4 of them
            event = other.webhooks.unwrap(
                answering.requests[0].body, answering.requests[0].headers, secret=theirs.signing_secret
            )
            assert event.data.id == "resp_other"  # type: ignore[union-attr]
            with pytest.raises(openai.BadRequestError) as refused:
                hostile.webhooks.create(name="x", url="http://127.0.0.1:1/\r\nX: 1", event_types=["batch.failed"])
            assert refused.value.body["param"] == "url"  # type: ignore[index]
        finally:
            hanging.released.set()


def test_embedded_a_tenants_hanging_receivers_delay_only_its_own_deliveries(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    server = ServerProcess({"RESPONSES_DATABASE_URL": url, **HOSTILE}, tmp_path / "server.log")
    try:
        server.start()
        hanging_tenant_beside_another(server, url)
    finally:
        server.stop()


def test_distributed_a_tenants_hanging_receivers_delay_only_its_own_deliveries(cluster: Cluster) -> None:
    node = cluster.api(**HOSTILE)
    try:
        hanging_tenant_beside_another(node, cluster.database_url)
    finally:
        node.stop()
