"""WebSocket /v1/responses (the SDK's `client.responses.connect()`): authenticate the upgrade, then relay each
message's events in order while listening for the client going away."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing

import anyio
from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from app.api.deps import tenant_for
from app.errors import ApiError
from app.runtime import Runtime
from app.services.socket_session import ResponsesSocketSession

router = APIRouter()
#: Close code for a refused upgrade where the server cannot answer it with an HTTP status (policy violation).
POLICY_VIOLATION = 1008
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
        tenant = tenant_for(websocket.headers.get("authorization", ""), runtime.settings)
        # A connection holds one of its tenant's in-flight slots for as long as it is open.
        runtime.slots.acquire(tenant)
    except ApiError as error:
        await _refuse(websocket, error)
        return
    try:
        await _serve(websocket, runtime, tenant)
    finally:
        runtime.slots.release(tenant)


async def _serve(websocket: WebSocket, runtime: Runtime, tenant: str) -> None:
    await websocket.accept()
    session = ResponsesSocketSession(runtime, tenant)
    inbox: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def read(cancel: anyio.CancelScope) -> None:
        # Messages are queued while a response runs (they run after it, in order); a client that goes away
        # cancels the one running, whose relay then cancels its generation.
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("text")
                await inbox.put(data if data is not None else message.get("bytes") or b"")
        except WebSocketDisconnect:
            pass
        cancel.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(read, group.cancel_scope)
        while True:
            message = await inbox.get()
            async with aclosing(session.handle(message)) as events:
                async for event in events:
                    try:
                        await websocket.send_text(json.dumps(event, separators=(",", ":")))
                    except (WebSocketDisconnect, RuntimeError):
                        # The client has gone (Starlette raises RuntimeError once it has seen the close): stop.
                        group.cancel_scope.cancel()
                        return
