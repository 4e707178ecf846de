"""What the batch tests share: a JSONL input file, uploading it, driving the advance until a status, reading a
result file back by custom_id."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import httpx

from app.batches.advance import advance_batches
from app.runtime import Runtime

TERMINAL = ("completed", "failed", "expired", "cancelled")


def request_line(custom_id: str, body: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/responses", "body": body or {"input": custom_id}}
    return {**line, **fields}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def upload(client: httpx.AsyncClient, data: bytes) -> str:
    reply = await client.post("/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})
    assert reply.status_code == 200, reply.text
    file_id: str = reply.json()["id"]
    return file_id


async def create_batch(client: httpx.AsyncClient, data: bytes) -> dict[str, Any]:
    body = {"input_file_id": await upload(client, data), "endpoint": "/v1/responses", "completion_window": "24h"}
    reply = await client.post("/v1/batches", json=body)
    assert reply.status_code == 200, reply.text
    batch: dict[str, Any] = reply.json()
    assert batch["status"] == "validating"
    return batch


async def advance_until(
    runtime: Runtime,
    client: httpx.AsyncClient,
    batch_id: str,
    statuses: tuple[str, ...] = TERMINAL,
    *,
    now: datetime | None = None,
    rounds: int = 400,
) -> dict[str, Any]:
    """Advance (at `now`) until the batch is in one of `statuses`, letting its lines run in between."""
    for _ in range(rounds):
        await advance_batches(runtime, now)
        batch: dict[str, Any] = (await client.get(f"/v1/batches/{batch_id}")).json()
        if batch["status"] in statuses:
            return batch
        await asyncio.sleep(0.01)
    raise AssertionError(f"batch {batch_id} is still {batch['status']}")


async def result_lines(client: httpx.AsyncClient, file_id: str | None) -> dict[str, dict[str, Any]]:
    """A result file's lines by custom_id (each custom_id once)."""
    if file_id is None:
        return {}
    reply = await client.get(f"/v1/files/{file_id}/content")
    assert reply.status_code == 200
    lines = [json.loads(line) for line in reply.content.splitlines()]
    by_id = {line["custom_id"]: line for line in lines}
    assert len(by_id) == len(lines), "a custom_id written twice"
    return by_id
