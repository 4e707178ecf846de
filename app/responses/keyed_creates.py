"""A create that sent an Idempotency-Key: its response is created once for the key (within its window), and a
retry with the same request attaches to it, whether it is still running or has ended.

What differs from a create without a key, and why: the id is fixed when the key is claimed and the key names
the response in the transaction that stores it (a retry from then on finds it, on any node); the generation
does not stop when its client leaves (the client said it may come back for it: a retry collects it, a DELETE
stops it); a stream's events are stored as a background stream's are, so that a retry replays it from its
first event, as `GET /v1/responses/{id}?stream=true` does. `store: false` cannot be answered twice (nothing of
it is kept): it is a 400."""

from __future__ import annotations

from fastapi.responses import Response

from app.api.sse import EventStreamResponse
from app.errors import InvalidRequest, response_not_found
from app.events.terminal import TERMINAL_STATUSES
from app.idempotency.answers import replayed
from app.idempotency.claims import Claim, Earlier, claim_key, release
from app.idempotency.header import IDEMPOTENCY_HEADER, REPLAYED_HEADER, KeyedRequest
from app.ids import new_id
from app.responses import repository, service, submission
from app.responses.reads import read_response
from app.responses.relay import RelayMode, relay_events
from app.responses.runs import final_response, require_worker
from app.responses.schemas import CreateResponseRequest
from app.runtime import Runtime
from app.schemas.responses import ResponseObject

REPLAYED = {REPLAYED_HEADER: "true"}


def unstored_key() -> InvalidRequest:
    return InvalidRequest(
        f"An {IDEMPOTENCY_HEADER} needs a stored response (store: true): an unstored one cannot be answered again.",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_unstored",
    )


async def create_keyed(request: CreateResponseRequest, keyed: KeyedRequest, tenant: str, runtime: Runtime) -> Response:
    """The create, run once for the key: a new response, or the one the key made."""
    if request.store is False:
        raise unstored_key()
    outcome = await claim_key(runtime, tenant, keyed, resource_id=new_id("resp"))
    if isinstance(outcome, Earlier):
        if outcome.resource_id is None:  # cannot be: the hash covers the path; said again all the same
            return replayed(outcome)
        return await _attach(runtime, request, outcome.resource_id, tenant)
    try:
        return await _create(runtime, request, outcome, tenant)
    except BaseException:
        # Before the response was stored (a 400, a 429, no worker): nothing to attach to, the key is free again.
        # After, this changes nothing: the key names the response.
        await release(runtime, outcome)
        raise


async def _create(runtime: Runtime, request: CreateResponseRequest, claim: Claim, tenant: str) -> Response:
    stream = bool(request.stream)
    prepared = await service.prepare(request, tenant, runtime, response_id=claim.resource_id, keep_events=stream)
    prepared.key_claim = claim
    headers = submission.answer_headers(prepared)
    if stream:
        if not request.background:
            # A foreground stream of kept events relays as a replay (its client may leave), yet needs a worker now.
            await require_worker(runtime, prepared.job.model)
        return EventStreamResponse(await submission.open_stream(runtime, prepared, tenant), headers=headers)
    # NOTE: not stopped when the client leaves (no unless_client_leaves): its retry waits for this very response.
    response = await submission.create_response(runtime, prepared, tenant)
    return Response(response.model_dump_json(), media_type="application/json", headers=headers)


async def _attach(runtime: Runtime, request: CreateResponseRequest, response_id: str, tenant: str) -> Response:
    """The key's response, answered as its create would be: a stream replayed from its first event and followed
    to its end; a background create's response as it is now; a foreground create's once it has ended."""
    async with runtime.database.read() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:  # deleted since
        raise response_not_found(response_id)
    if request.stream:
        subscription = await runtime.queue.bus.subscribe(response_id)
        events = relay_events(runtime, response_id, subscription, RelayMode.REPLAY)
        return EventStreamResponse(events, headers=REPLAYED)
    if request.background or row.status in TERMINAL_STATUSES:
        response = await read_response(runtime.database, response_id, tenant)
    else:
        response = await _when_ended(runtime, response_id, tenant)
    return Response(response.model_dump_json(), media_type="application/json", headers=REPLAYED)


async def _when_ended(runtime: Runtime, response_id: str, tenant: str) -> ResponseObject:
    """A foreground response once it has ended, followed as a replay follows (its live events, else the stored
    row): not stopped if this client leaves too."""
    subscription = await runtime.queue.bus.subscribe(response_id)
    final = await final_response(relay_events(runtime, response_id, subscription, RelayMode.REPLAY))
    return final if final is not None else await read_response(runtime.database, response_id, tenant)
