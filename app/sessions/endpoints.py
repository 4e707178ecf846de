"""/v1/responses in WebSocket mode (the SDK's `client.responses.connect()`): authenticate the upgrade, then answer
each message the server does not take at once, and relay the responses of the others in order, while listening
for the client going away. Thin: the connection's state and rules are the session's (socket_session.py)."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from app.errors import ApiError, Unauthorized
from app.observability.metrics import WEBSOCKET_CONNECTIONS
from app.runtime import Runtime
from app.sessions.lanes import too_many_lanes
from app.sessions.socket_session import EventRefused, IdleClock, ResponsesSocketSession, SocketCreate
from app.sessions.steering import Steer
from app.tenants.identity import PROJECT_HEADER

router = APIRouter()
#: Close code for a refused upgrade where the server cannot answer it with an HTTP status (policy violation).
POLICY_VIOLATION = 1008
NORMAL_CLOSURE = 1000
DENIAL_EXTENSION = "websocket.http.response"


async def _refuse(websocket: WebSocket, error: ApiError) -> None:
    """The same 401 as HTTP where the server can send one on an upgrade; else a policy-violation close."""
    if DENIAL_EXTENSION in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse(error.body(), status_code=error.status_code, headers=error.headers or None)
        )
    else:
        await websocket.close(code=POLICY_VIOLATION, reason=error.message[:120])


@router.websocket("/responses")
async def responses_socket(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    try:
        identity = await runtime.authenticator.identify(
            websocket.headers.get("authorization", ""), websocket.headers.get(PROJECT_HEADER)
        )
        identity.require_write()  # every message on the socket is a create
        tenant = identity.tenant
        # Connections are counted apart from requests: an open one takes one of its tenant's request slots only
        # while a response runs on it (below), so idle connections never lock the tenant's requests out.
        runtime.sockets.acquire(tenant)
    except ApiError as error:
        await _refuse(websocket, error)
        return
    try:
        await _serve(websocket, runtime, tenant)
    finally:
        runtime.sockets.release(tenant)


async def _serve(websocket: WebSocket, runtime: Runtime, tenant: str) -> None:
    await websocket.accept()
    WEBSOCKET_CONNECTIONS.inc()
    settings = runtime.settings
    session = ResponsesSocketSession(runtime, tenant)
    # The creates waiting on each lane (stream_id) with work, its running one apart. Bounded: once one is full,
    # the reader waits for room and the client's sends wait on TCP (backpressure).
    lanes: dict[str | None, asyncio.Queue[SocketCreate]] = {}
    # The reader answers refused events while a response's events go out: one frame at a time.
    sending = anyio.Lock()
    idle = IdleClock(settings.websocket_idle_timeout_s)
    authorization = websocket.headers.get("authorization", "")

    async def send(event: dict[str, Any]) -> bool:
        """Send one event; False when the client has gone (Starlette raises RuntimeError once it saw the close)."""
        try:
            async with sending:
                await websocket.send_text(json.dumps(event, separators=(",", ":")))
        except (WebSocketDisconnect, RuntimeError):
            return False
        return True

    def waiting() -> bool:
        return any(not queue.empty() for queue in lanes.values())

    async def read(group: TaskGroup) -> None:
        # Each message is checked as it comes: one the server does not take is answered at once, even while a
        # response runs; a create waits for the ones before it on its lane. A client that goes away cancels the
        # ones running, whose relays then cancel their generations. One that sits idle is closed.
        try:
            while True:
                with anyio.move_on_after(idle.left(waiting=waiting())) as wait:
                    message = await websocket.receive()
                if wait.cancelled_caught:
                    if idle.expired(waiting=waiting()):
                        await websocket.close(code=NORMAL_CLOSURE, reason=f"idle for {idle.timeout_s:g} s")
                        break
                    continue
                idle.touch()
                if message["type"] == "websocket.disconnect":
                    break
                try:
                    # A key revoked since the upgrade is refused here too (as soon as this node's cache knows).
                    await runtime.authenticator.identify(authorization)
                except Unauthorized as error:
                    await send({"type": "error", "status": error.status_code, **error.body()})
                    await websocket.close(code=POLICY_VIOLATION, reason=error.message[:120])
                    break
                data = message.get("text")
                try:
                    admitted = session.admit(data if data is not None else message.get("bytes") or b"")
                except EventRefused as refused:
                    if not await send(refused.event):
                        break
                    continue
                if isinstance(admitted, Steer):  # answered now: it is for a response running now
                    if not all([await send(event) for event in await session.steer(admitted)]):
                        break
                    continue
                if not await enqueue(admitted, group):
                    break
        except WebSocketDisconnect:
            pass
        group.cancel_scope.cancel()

    async def enqueue(create: SocketCreate, group: TaskGroup) -> bool:
        """Queue a create on its lane, opening the lane if it has no work (refused beyond the lanes' limit)."""
        stream_id = create.about.stream_id
        queue = lanes.get(stream_id)
        if queue is None:
            if len(lanes) >= settings.websocket_max_lanes:
                return await send(session.refuse(create, too_many_lanes(settings.websocket_max_lanes)))
            queue = lanes[stream_id] = asyncio.Queue(maxsize=settings.websocket_max_queued)
            group.start_soon(run_lane, stream_id, queue, group.cancel_scope)
        await queue.put(create)
        return True

    async def run_lane(stream_id: str | None, queue: asyncio.Queue[SocketCreate], cancel: anyio.CancelScope) -> None:
        """One lane's creates, one at a time in order; the lane closes (its place free) once none waits."""
        while True:
            if not await respond(await queue.get()):
                cancel.cancel()
                return
            if queue.empty():
                del lanes[stream_id]
                return

    async def respond(create: SocketCreate) -> bool:
        """Run one create, holding one of the tenant's request slots while it runs; False once the client left."""
        try:
            runtime.slots.acquire(tenant, (await runtime.policy.limits_of(tenant)).max_concurrent_requests)
        except ApiError as error:  # the tenant's requests hold every slot (or its limits are unreadable): refused
            return await send(session.refuse(create, error))
        try:
            with idle.busy():
                async with aclosing(session.run(create)) as events:
                    async for event in events:
                        if not await send(event):
                            return False
        finally:
            runtime.slots.release(tenant)
        return True

    async with anyio.create_task_group() as group:
        group.start_soon(read, group)
