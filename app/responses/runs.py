"""Starting a response's job and following it: subscribe to its events before it starts (so that none is missed),
start it, relay its events; or wait for its final Response. The one seam through which a create (submission.py)
and a compaction's summary (compaction.py) both run a job."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from app.errors import ServerError, ServiceUnavailable
from app.events.terminal import is_terminal
from app.generation.job import GenerationJob
from app.responses.relay import RelayMode, relay_events
from app.runtime import Runtime
from app.schemas.responses import ResponseObject


async def require_worker(runtime: Runtime, model: str) -> None:
    # A background job may wait in the queue for a worker; a client holding a connection should not.
    if not await runtime.queue.live_workers(model):
        raise ServiceUnavailable(
            f"No worker serving the model '{model}' is available to generate this response.",
            param="model",
            code="no_workers",
        )


async def start_and_follow(
    runtime: Runtime,
    job: GenerationJob,
    mode: RelayMode,
    start: Callable[[], Awaitable[None]],
    *,
    snapshot: ResponseObject | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Subscribe, `start` the job (store and enqueue it: before the first event, so that faults are plain HTTP
    errors), then relay its events in `mode`. A foreground client, holding its connection, needs a live worker now."""
    if mode.foreground:
        await require_worker(runtime, job.model)
    subscription = await runtime.queue.bus.subscribe(job.response_id)
    try:
        await start()
    except BaseException:
        await subscription.close()
        raise
    return relay_events(runtime, job.response_id, subscription, mode, snapshot=snapshot)


async def final_response(events: AsyncIterator[dict[str, Any]]) -> ResponseObject | None:
    """The Response of the terminal event the stream ends with (None when none came)."""
    final: dict[str, Any] | None = None
    async for event in events:
        if is_terminal(event):
            final = event["response"]
    return ResponseObject.model_validate(final) if final is not None else None


async def run_to_final(runtime: Runtime, job: GenerationJob) -> ResponseObject:
    """A job that keeps nothing (a compaction's summary), on the normal path: enqueued, run where the model is,
    its events relayed here until the end."""
    snapshot = ResponseObject.model_validate(job.response)
    # The summary's prompt is charged to the tenant's tokens per minute as a create's is (its output where it ends).
    await runtime.limits.admit_tokens(job.tenant, len(job.prompt_tokens))
    events = await start_and_follow(
        runtime, job, RelayMode.UNSTORED, partial(runtime.queue.enqueue, job), snapshot=snapshot
    )
    final = await final_response(events)
    if final is None:
        raise ServerError("The generation ended without a result.", code="server_error")
    return final
