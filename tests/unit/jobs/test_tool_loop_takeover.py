"""A tool loop under leases, in-process with the fake model against a real MCP server on loopback: a run that dies
between calls is taken over after the last recorded item (no completed call made again, its output back in the
prompt); a call in flight when its run died is recorded failed, never retried, and the model goes on; a cancel
during a call aborts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.generation.types import Finish, GenerationFailed
from app.jobs import event_batches
from app.jobs.execution import JobExecution
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.jobs.tool_loop import STOPPED, ToolLoop
from app.mcp.calls import McpCaller
from app.mcp.servers import McpServer
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.mcp_server import ToolServer, tool_server
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

# Reconciliation rounds are run by hand here (the server's own loop would race them).
pytestmark = pytest.mark.settings(
    lease_s=1, max_attempts=2, reconcile_interval_s=3600, outbound_allowed_hosts="127.0.0.1:*"
)

ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ECHO = '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call>'
SLOW = '<tool_call>{"name": "slow", "arguments": {}}</tool_call>'


@pytest.fixture
async def server() -> AsyncIterator[ToolServer]:
    async with tool_server() as running:
        running.slow_s = 3
        yield running


def body(server: ToolServer, *, stream: bool) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": "calc", "server_url": server.url, "require_approval": "never"}
    return {"input": "use the tools", "tools": [tool], "background": True, "stream": stream}


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def take_over(runtime: Runtime) -> None:
    """Once the dead run's lease (1 s) has expired, a reconciliation round gives the job to another run."""
    await asyncio.sleep(1.2)
    policy = RecoveryPolicy.from_settings(runtime.settings)
    report = await Reconciler(runtime.database, runtime.queue, policy).run_round()
    assert report.taken_over == 1


async def ended(client: httpx.AsyncClient, response_id: str) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 10
    while (found := (await client.get(f"/v1/responses/{response_id}")).json())["status"] in ("queued", "in_progress"):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return found


def added(runner: FakeRunner, index: int, before: int | None = None) -> str:
    """What run `index`'s prompt adds to run `before`'s (default: the one before it), as the fake renderer reads
    its prompts: a line a message, then what a takeover appended (one token a character)."""
    renderer = runner.prompt_renderer
    assert isinstance(renderer, FakeRenderer)
    earlier = renderer.read(runner.jobs[index - 1 if before is None else before].prompt_tokens)
    later = renderer.read(runner.jobs[index].prompt_tokens)
    assert later.startswith(earlier), "a run continues the prompt of the one before"
    return later[len(earlier) :]


async def test_a_run_that_dies_between_calls_is_taken_over_and_no_completed_call_is_made_again(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_batches, "EVENT_FLUSH_EVENTS", 2)
    runner.delay_s = 0.005
    rounds(runner, ADD, ECHO, "w0 w1 w2 w3 w4 w5", "w0 w1 w2 w3 w4 w5")
    runner.crash_in_run = {2: 3}  # the third round (after both calls) dies after three words
    live = asyncio.create_task(client.post("/v1/responses", json=body(server, stream=True)))
    await until(lambda: len(runner.jobs) == 3)
    await take_over(app_runtime)
    events = parse_sse((await asyncio.wait_for(live, 30)).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    add, echo = final["output"][1:3]
    assert (add["status"], add["output"], echo["status"], echo["output"]) == ("completed", "5", "completed", "hi")
    assert server.calls == [("add", {"a": 2, "b": 3}), ("echo", {"text": "hi"})], "each call made once"
    # The takeover's prompt is the third round's (both results in it, as the dead run had them) and what it wrote.
    assert len(runner.jobs) == 4
    assert "<tool_response>\nhi\n</tool_response>" in added(runner, 2)
    assert added(runner, 3, before=2) == "w0 w1 w2"
    assert final["output"][3]["content"][0]["text"].startswith("w0 w1 w2w0 w1")
    # Usage: every round's prompt; as output, each round's words and what the dead run wrote of the third.
    prompts = sum(len(job.prompt_tokens) for job in runner.jobs[:3])
    assert final["usage"]["input_tokens"] == prompts
    words = len(ADD.split(" ")) + len(ECHO.split(" "))
    assert final["usage"]["output_tokens"] == words + len("w0 w1 w2") + 6
    replayed = parse_sse((await client.get(f"/v1/responses/{final['id']}", params={"stream": "true"})).text)
    assert replayed == events


async def test_a_round_taken_over_mid_text_then_calling_continues_the_prompt_once(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_batches, "EVENT_FLUSH_EVENTS", 2)
    runner.delay_s = 0.005
    second = f"w0 w1 w2 {ECHO}"
    rounds(runner, ADD, second, second, "Done.")
    runner.crash_in_run = {1: 3}  # the second round dies after "w0 w1 w2"; its takeover then calls echo
    live = asyncio.create_task(client.post("/v1/responses", json=body(server, stream=True)))
    await until(lambda: len(runner.jobs) == 2)
    await take_over(app_runtime)
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    assert final["status"] == "completed"
    kinds = [item["type"] for item in final["output"]]
    assert kinds == ["mcp_list_tools", "mcp_call", "message", "mcp_call", "message"]
    assert server.calls == [("add", {"a": 2, "b": 3}), ("echo", {"text": "hi"})]
    # The last round continues the second round's prompt with that round's whole text (the dead run's part and
    # the takeover's) once, then the result: not the takeover's prompt, which already held the dead run's part.
    assert len(runner.jobs) == 4
    said = final["output"][2]["content"][0]["text"]
    assert said == "w0 w1 w2w0 w1 w2 ", "the dead run's words and the takeover's, once"
    assert (
        added(runner, 3, before=1)
        == f"assistant: {said}\nassistant: {ECHO}\nuser: <tool_response>\nhi\n</tool_response>\n"
    )


async def test_a_run_that_died_after_reaching_max_tool_calls_is_ended_by_its_takeover_without_a_round(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds(runner, ADD, ADD, "never said")
    close = JobExecution._close

    async def dies_at_the_end(self: JobExecution, output: Finish | GenerationFailed) -> None:
        monkeypatch.setattr(JobExecution, "_close", close)  # the takeover lives
        raise RuntimeError("the worker died")

    monkeypatch.setattr(JobExecution, "_close", dies_at_the_end)
    live = asyncio.create_task(client.post("/v1/responses", json={**body(server, stream=True), "max_tool_calls": 1}))
    await until(lambda: len(runner.jobs) == 2)
    await take_over(app_runtime)
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    assert final["status"] == "completed"
    calls = [item for item in final["output"] if item["type"] == "mcp_call"]
    assert [call["status"] for call in calls] == ["completed", "failed"]
    assert "max_tool_calls" in calls[1]["error"]["message"]
    assert len(runner.jobs) == 2, "the model was not asked again"
    assert server.calls == [("add", {"a": 2, "b": 3})]


@pytest.mark.parametrize("approval", ["never", "always"])
async def test_a_run_that_died_after_a_round_with_client_calls_is_ended_by_its_takeover_with_them(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
    approval: str,
) -> None:
    """The round's MCP call made (or, `always`, asked for approval) and its function call waiting for the client:
    the takeover ends the response with them, without asking the model again."""
    function = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    lookup = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    rounds(runner, f"{ADD} {lookup}", "never said")
    close = JobExecution._close

    async def dies_at_the_end(self: JobExecution, output: Finish | GenerationFailed) -> None:
        monkeypatch.setattr(JobExecution, "_close", close)  # the takeover lives
        raise RuntimeError("the worker died")

    monkeypatch.setattr(JobExecution, "_close", dies_at_the_end)
    request = body(server, stream=True)
    request["tools"] = [{**request["tools"][0], "require_approval": approval}, function]
    live = asyncio.create_task(client.post("/v1/responses", json=request))
    if approval == "never":
        await until(lambda: len(runner.jobs) == 1 and server.calls != [])
    else:
        await until(lambda: len(runner.jobs) == 1)
    await take_over(app_runtime)
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    assert final["status"] == "completed"
    mcp_item = "mcp_call" if approval == "never" else "mcp_approval_request"
    assert [item["type"] for item in final["output"]] == ["mcp_list_tools", mcp_item, "function_call"]
    assert final["output"][2]["name"] == "lookup"
    assert len(runner.jobs) == 1, "the model was not asked again"
    assert server.calls == ([("add", {"a": 2, "b": 3})] if approval == "never" else [])


def dies_during(
    name: str, server: ToolServer, monkeypatch: pytest.MonkeyPatch, expected: dict[str, Any] | None = None
) -> None:
    """The worker dies while its call of `name` (with `expected` arguments) is in flight (the server has it): the
    call is abandoned and the run stops without an end, as a killed worker's would."""
    call = McpCaller.call

    async def dying(self: McpCaller, target: McpServer, tenant: str, tool: str, arguments: str) -> str:
        if tool != name:
            return await call(self, target, tenant, tool, arguments)
        flight = asyncio.create_task(call(self, target, tenant, tool, arguments))
        await until(lambda: (name, expected or {}) in server.calls)
        monkeypatch.setattr(McpCaller, "call", call)  # the next worker lives
        flight.cancel()
        raise RuntimeError("the worker died")

    monkeypatch.setattr(McpCaller, "call", dying)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
async def test_a_call_in_flight_when_its_run_died_is_failed_and_never_made_again(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    rounds(runner, ADD, SLOW, "It stopped.")
    dies_during("slow", server, monkeypatch)
    live = asyncio.create_task(client.post("/v1/responses", json=body(server, stream=stream)))
    await until(lambda: ("slow", {}) in server.calls)
    await take_over(app_runtime)
    if stream:
        events = parse_sse((await asyncio.wait_for(live, 30)).text)
        final = assert_well_formed_stream(events)
    else:
        final = await ended(client, (await asyncio.wait_for(live, 30)).json()["id"])
    assert final["status"] == "completed", final
    assert [item["type"] for item in final["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    _, add, slow, message = final["output"]
    assert add["status"] == "completed" and add["output"] == "5"
    assert slow["status"] == "failed" and slow["output"] is None
    assert slow["error"]["message"] == STOPPED
    assert message["content"][0]["text"] == "It stopped."
    assert server.calls == [("add", {"a": 2, "b": 3}), ("slow", {})], "the call in flight was not made again"
    # The model read that the call failed, and went on from there (the third round, on the takeover).
    assert len(runner.jobs) == 3
    assert f"Error: {STOPPED}" in added(runner, 2)
    if stream:
        replayed = parse_sse((await client.get(f"/v1/responses/{final['id']}", params={"stream": "true"})).text)
        assert replayed == events


async def test_a_cancel_of_a_run_that_died_in_a_call_closes_the_call(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds(runner, SLOW, "never said")
    dies_during("slow", server, monkeypatch)
    live = asyncio.create_task(client.post("/v1/responses", json=body(server, stream=True)))
    await until(lambda: ("slow", {}) in server.calls)
    # The cancel waits for the dead run's lease (1 s) to expire, then ends the response from what it recorded.
    cancelled = await client.post(f"/v1/responses/{runner.jobs[0].response_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    assert final["status"] == "cancelled"
    call = final["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "incomplete"
    assert len(runner.jobs) == 1 and server.calls == [("slow", {})]


async def approval_of_a_call(client: httpx.AsyncClient, server: ToolServer, runner: FakeRunner) -> dict[str, Any]:
    """An approval request for `add` (every call needs one); the body of its approval, to send in background."""
    tool = {"type": "mcp", "server_label": "calc", "server_url": server.url}
    rounds(runner, ADD)
    asked = (await client.post("/v1/responses", json={"input": "2 + 3?", "tools": [tool]})).json()
    request = asked["output"][-1]
    assert request["type"] == "mcp_approval_request", asked
    approval = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    return {"input": [approval], "previous_response_id": asked["id"], "tools": [tool], "background": True}


@pytest.mark.parametrize("dies", ["before the round is recorded", "during the approved call"])
async def test_an_approved_call_is_made_by_the_takeover_only_if_no_run_began_it(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    server: ToolServer,
    monkeypatch: pytest.MonkeyPatch,
    dies: str,
) -> None:
    approved = await approval_of_a_call(client, server, runner)
    if dies == "during the approved call":
        dies_during("add", server, monkeypatch, {"a": 2, "b": 3})
    else:
        approved_round = ToolLoop.approved_round

        def dying(self: ToolLoop, assembler: Any) -> Any:
            monkeypatch.setattr(ToolLoop, "approved_round", approved_round)  # the takeover lives
            raise RuntimeError("the worker died")

        monkeypatch.setattr(ToolLoop, "approved_round", dying)
    rounds(runner, "The sum is in.", "The sum is in.")
    live = asyncio.create_task(client.post("/v1/responses", json={**approved, "stream": True}))
    if dies == "during the approved call":
        await until(lambda: ("add", {"a": 2, "b": 3}) in server.calls)
    await take_over(app_runtime)
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    assert final["status"] == "completed", final
    call, message = final["output"]
    assert call["type"] == "mcp_call" and message["type"] == "message"
    assert server.calls == [("add", {"a": 2, "b": 3})], "made once: by the takeover, or by the run that died"
    if dies == "during the approved call":
        assert call["status"] == "failed" and call["error"]["message"] == STOPPED
    else:
        assert call["status"] == "completed" and call["output"] == "5"
