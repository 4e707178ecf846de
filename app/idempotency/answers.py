"""A create other than a response's, run at most once for its Idempotency-Key: the first request runs it and its
answer is kept; a later one with the same request gets that answer again, byte for byte, with its status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi.responses import Response
from pydantic import BaseModel

from app.idempotency.claims import Earlier, claim_key, release, remember
from app.idempotency.header import REPLAYED_HEADER, KeyedRequest
from app.runtime import Runtime

Answer = TypeVar("Answer", bound=BaseModel)
#: The status every create answers with when it succeeds.
CREATED = 200


def replayed(earlier: Earlier) -> Response:
    """What the key's first request answered, said again."""
    return Response(
        earlier.body, status_code=earlier.status_code, media_type="application/json", headers={REPLAYED_HEADER: "true"}
    )


async def create_once(
    runtime: Runtime, tenant: str, keyed: KeyedRequest | None, create: Callable[[], Awaitable[Answer]]
) -> Answer | Response:
    """`create`'s answer: run now (without a key, as ever; with one, its answer kept for the key's window), or
    the one the key's first request got. An error is not kept: the key is released, and a retry runs `create`."""
    if keyed is None:
        return await create()
    outcome = await claim_key(runtime, tenant, keyed)
    if isinstance(outcome, Earlier):
        return replayed(outcome)
    try:
        answer = await create()
        body = answer.model_dump_json().encode()
    except BaseException:
        await release(runtime, outcome)
        raise
    await remember(runtime, outcome, CREATED, body)
    return Response(body, status_code=CREATED, media_type="application/json")
