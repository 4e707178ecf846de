"""The `mcp` tool on the real model against a real MCP server on loopback, in both modes: embedded (in-process,
SQLite) and distributed (an API node and a worker process on Postgres and Redis). A forced call whose output
reaches the response (streamable HTTP, and an SSE-only server through the fallback); allowed_tools with a tool
that hangs past the call timeout; a server that is down, and one that speaks neither transport; a cancel during a
call; and (distributed) a worker SIGKILLed in the middle of a tool loop, taken over without making a call again.
Each response is short (forced calls, temperature 0, few output tokens)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from app.config import Settings
from app.jobs.tool_loop import STOPPED
from app.main import create_app
from app.testing.cluster import Cluster, db_rows, sigkill, worker_id
from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.mcp_server import ToolServer, closed_port_url, plain_http_server, tool_server
from app.testing.servers import run_cli, wait_until_ready
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"
#: RESPONSES_MCP_CALL_TIMEOUT_S in both modes: the `slow` tool (30 s) hangs past it.
CALL_TIMEOUT_S = 4
#: Short leases in distributed mode, so that a killed worker's job is taken over in seconds.
FAST_LEASES = {"RESPONSES_LEASE_S": "3", "RESPONSES_RECONCILE_INTERVAL_S": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    with fresh_postgres_database() as database_url:
        env = {
            **FAST_LEASES,
            "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
            "RESPONSES_MCP_CALL_TIMEOUT_S": str(CALL_TIMEOUT_S),
        }
        made = Cluster(database_url, redis_url, tmp_path_factory.mktemp("mcp-cluster"), env)
        migrated = run_cli(["migrate"], made.env())
        assert migrated.returncode == 0, migrated.stderr
        try:
            made.api()
            made.worker()
            wait_until_ready(made.processes[0].base_url)
            yield made
        finally:
            made.stop_all()


@pytest.fixture(params=["embedded", "distributed"])
def api_url(request: pytest.FixtureRequest) -> str | None:
    """The distributed cluster's API node; None: embedded (set up outside the event loop, as the cluster is)."""
    if request.param == "embedded":
        return None
    cluster: Cluster = request.getfixturevalue("cluster")
    return cluster.processes[0].base_url


@pytest.fixture
async def client(api_url: str | None, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    if api_url is not None:
        async with httpx.AsyncClient(base_url=api_url, timeout=600) as http:
            yield http
        return
    settings = Settings(
        database_url=sqlite_url(tmp_path),
        n_threads=1,
        outbound_allowed_hosts="127.0.0.1:*",
        mcp_call_timeout_s=CALL_TIMEOUT_S,
        _env_file=None,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as http:
            yield http


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    async with tool_server() as running:
        yield running


def mcp_tool(server: ToolServer, allowed: list[str]) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "calc",
        "server_url": server.url,
        "allowed_tools": allowed,
        "require_approval": "never",
    }


def forced(server: ToolServer, name: str, prompt: str, **fields: Any) -> dict[str, Any]:
    """A request that calls `name` (only it allowed) first, then answers in a few tokens."""
    return {
        "input": prompt,
        "tools": [mcp_tool(server, [name])],
        "tool_choice": {"type": "mcp", "server_label": "calc", "name": name},
        "temperature": 0,
        "max_output_tokens": 48,
        **fields,
    }


async def until(condition: Any, timeout_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def ended(client: httpx.AsyncClient, response_id: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (found := (await client.get(f"/v1/responses/{response_id}")).json())["status"] in ("queued", "in_progress"):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)
    return found


async def test_a_forced_call_s_output_reaches_the_answer(client: httpx.AsyncClient, server: ToolServer) -> None:
    body = forced(server, "add", "What is 1234 + 4321? Use the add tool, then answer with the number only.")
    body["max_output_tokens"] = 96
    reply = await client.post("/v1/responses", json={**body, "stream": True})
    assert reply.status_code == 200, reply.text
    final = assert_well_formed_stream(parse_sse(reply.text))
    kinds = [item["type"] for item in final["output"]]
    assert kinds[:2] == ["mcp_list_tools", "mcp_call"], final["output"]
    call = final["output"][1]
    assert call["status"] == "completed", call
    arguments = json.loads(call["arguments"])
    assert server.calls == [("add", arguments)]
    assert call["output"] == str(arguments["a"] + arguments["b"])
    # The model went on from the result in the same response (not forced again), its prefix reused.
    assert final["status"] == "completed" and kinds[-1] == "message", final["output"]
    assert final["usage"]["input_tokens_details"]["cached_tokens"] > 0
    assert final["usage"]["input_tokens"] > 0
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert [item["type"] for item in stored["output"]] == kinds


async def test_an_sse_only_server_is_called_through_the_fallback(client: httpx.AsyncClient) -> None:
    async with tool_server("sse") as sse:
        body = forced(sse, "add", "What is 20 + 22? Use the add tool, then answer with the number only.")
        final = (await client.post("/v1/responses", json=body)).json()
        assert final["output"][0]["type"] == "mcp_list_tools" and final["output"][0]["error"] is None, final
        call = final["output"][1]
        assert call["type"] == "mcp_call" and call["status"] == "completed", call
        arguments = json.loads(call["arguments"])
        assert sse.calls == [("add", arguments)] and call["output"] == str(arguments["a"] + arguments["b"])
        assert sse.methods[:2] == ["POST", "GET"], "the streamable handshake refused, then the SSE stream"
    async with plain_http_server() as plain:
        tool = {"type": "mcp", "server_label": "web", "server_url": plain.url, "require_approval": "never"}
        reply = await client.post("/v1/responses", json={"input": "hi", "tools": [tool]})
    assert reply.status_code == 200, reply.text
    failed = reply.json()
    assert failed["status"] == "failed" and "neither MCP transport" in failed["output"][0]["error"], failed


async def test_allowed_tools_and_a_tool_that_hangs_past_the_call_timeout(
    client: httpx.AsyncClient, server: ToolServer
) -> None:
    body = forced(server, "slow", "Call the slow tool, then say whether it worked.")
    final = (await client.post("/v1/responses", json=body)).json()
    listing, call, *rest = final["output"]
    assert [tool["name"] for tool in listing["tools"]] == ["slow"], "only the allowed tool is listed"
    assert call["name"] == "slow" and call["status"] == "failed" and call["output"] is None
    assert f"within {CALL_TIMEOUT_S} s" in call["error"]["message"]
    assert server.calls == [("slow", {})]
    # The call failed, not the response: the model went on from the error.
    assert final["status"] in ("completed", "incomplete") and final["error"] is None, final
    assert [item["type"] for item in rest] == ["message"]


async def test_a_server_that_is_down_fails_the_listing_and_the_response(client: httpx.AsyncClient) -> None:
    tool = {"type": "mcp", "server_label": "gone", "server_url": closed_port_url(), "require_approval": "never"}
    reply = await client.post("/v1/responses", json={"input": "hi", "tools": [tool], "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "failed"
    assert "gone" in final["error"]["message"] and "tool list" in final["error"]["message"]
    (listing,) = final["output"]
    assert listing["type"] == "mcp_list_tools" and listing["error"] and listing["tools"] == []


async def test_a_cancel_during_a_call_aborts_it(client: httpx.AsyncClient, server: ToolServer) -> None:
    body = forced(server, "slow", "Call the slow tool.", background=True)
    created = (await client.post("/v1/responses", json=body)).json()
    await until(lambda: ("slow", {}) in server.calls)
    cancelled = await client.post(f"/v1/responses/{created['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    final = await ended(client, created["id"])
    assert final["status"] == "cancelled"
    call = final["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "failed" and "Cancelled" in call["error"]["message"]
    # Aborted by the cancel (its error says so, not the timeout's): its session closed, the tool stopped on the
    # server, called once.
    await until(lambda: server.interrupted == 1)
    assert "DELETE" in server.methods and server.calls == [("slow", {})]


async def sql(cluster: Cluster, query: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(db_rows, cluster.database_url, query)


async def new_worker(cluster: Cluster) -> None:
    """Another worker (the last one was killed): it takes the job over once the dead one's lease expires."""
    await asyncio.to_thread(lambda: worker_id(cluster.worker("worker-after-kill")))


async def test_a_worker_killed_during_a_call_is_taken_over_and_the_call_not_made_again(
    cluster: Cluster, server: ToolServer
) -> None:
    async with httpx.AsyncClient(base_url=cluster.processes[0].base_url, timeout=600) as client:
        server.slow_s = 60
        body = forced(server, "slow", "Call the slow tool, then say whether it worked.", background=True)
        created = (await client.post("/v1/responses", json=body)).json()
        await until(lambda: ("slow", {}) in server.calls)
        sigkill(cluster.processes[-1])  # the worker, as in a crash
        await new_worker(cluster)
        final = await ended(client, created["id"])
    assert final["status"] in ("completed", "incomplete") and final["error"] is None, final
    _, call, *rest = final["output"]
    assert call["status"] == "failed" and call["error"]["message"] == STOPPED, final["output"]
    assert server.calls == [("slow", {})], "a call that may have run is not made again"
    assert [item["type"] for item in rest] == ["message"], "the model went on"


#: Holds a worker's first store of the round after a recorded call (its stream's first event batch), so that
#: the worker is killed between the call and the answer, whatever the machine's speed.
HOLD_AFTER_A_CALL = """
BEGIN
    IF EXISTS (SELECT 1 FROM generation_progress WHERE response_id = NEW.response_id
               AND pieces::text LIKE '%"mcp_call"%') THEN
        PERFORM pg_sleep(3600);
    END IF;
    RETURN NEW;
END;
"""


async def test_a_worker_killed_after_a_call_is_taken_over_and_the_call_not_made_again(
    cluster: Cluster, server: ToolServer
) -> None:
    held = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
    await sql(
        cluster, f"CREATE FUNCTION hold_after_call() RETURNS trigger LANGUAGE plpgsql AS $$ {HOLD_AFTER_A_CALL} $$"
    )
    await sql(
        cluster,
        "CREATE TRIGGER hold_after_call BEFORE INSERT ON generation_progress FOR EACH ROW "
        "EXECUTE FUNCTION hold_after_call()",
    )
    async with httpx.AsyncClient(base_url=cluster.processes[0].base_url, timeout=600) as client:
        body = forced(
            server, "add", "What is 1234 + 4321? Use the add tool, then answer.", background=True, stream=True
        )
        live = asyncio.create_task(client.post("/v1/responses", json=body))
        deadline = asyncio.get_running_loop().time() + 120
        while not await sql(cluster, held):  # the call is recorded and the worker is held in the next round
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.1)
        sigkill(cluster.processes[-1])  # the worker, as in a crash
        await sql(cluster, f"SELECT pg_terminate_backend(pid) FROM ({held}) AS held")
        await sql(cluster, "DROP TRIGGER hold_after_call ON generation_progress")
        await sql(cluster, "DROP FUNCTION hold_after_call")
        await new_worker(cluster)
        reply = await asyncio.wait_for(live, 120)
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] in ("completed", "incomplete") and final["error"] is None, final
    _, call, *rest = final["output"]
    arguments = json.loads(call["arguments"])
    assert call["status"] == "completed" and call["output"] == str(arguments["a"] + arguments["b"]), call
    assert server.calls == [("add", arguments)], "the completed call is not made again"
    assert [item["type"] for item in rest] == ["message"]
    assert sum(event["type"] == "response.mcp_call.completed" for event in events) == 1


async def test_the_approval_round_trip(client: httpx.AsyncClient, server: ToolServer) -> None:
    """A forced call waits for approval (require_approval left out: as the hosted API, every call does); the
    approval, chained, makes the call, and the model goes on from its output in the same response."""
    tool = {**mcp_tool(server, ["add"])}
    del tool["require_approval"]
    body: dict[str, Any] = {
        "input": "What is 1234 + 4321? Use the add tool, then answer with the number only.",
        "tools": [tool],
        "tool_choice": {"type": "mcp", "server_label": "calc", "name": "add"},
        "temperature": 0,
        "max_output_tokens": 96,
        "stream": True,
    }
    reply = await client.post("/v1/responses", json=body)
    assert reply.status_code == 200, reply.text
    first = assert_well_formed_stream(parse_sse(reply.text))
    assert first["status"] == "completed"
    assert [item["type"] for item in first["output"]] == ["mcp_list_tools", "mcp_approval_request"]
    request = first["output"][1]
    assert request["name"] == "add" and server.calls == [], "nothing is called before the approval"
    arguments = json.loads(request["arguments"])

    approve = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    reply = await client.post("/v1/responses", json={**body, "input": [approve], "previous_response_id": first["id"]})
    assert reply.status_code == 200, reply.text
    final = assert_well_formed_stream(parse_sse(reply.text))
    kinds = [item["type"] for item in final["output"]]
    assert final["status"] == "completed" and kinds[0] == "mcp_call" and kinds[-1] == "message", final["output"]
    call = final["output"][0]
    assert call["approval_request_id"] == request["id"] and call["status"] == "completed", call
    assert server.calls == [("add", arguments)]
    total = str(arguments["a"] + arguments["b"])
    assert call["output"] == total
    # NOTE: the shipped test model is too small to say the sum back reliably: that it answered after the
    # call (not another call, not a request) is what shows the round went on from the output.
    assert final["output"][-1]["content"][0]["text"].strip()
    assert final["usage"]["input_tokens"] > first["usage"]["input_tokens"], "the call and output were read"
