"""One request at a time holds a tenant's Idempotency-Key (the database decides, whichever node the requests
reach): the first claims it and runs the create; a later one with the same request gets what the first answered,
waits a bounded time while the first still runs, or is a 409; one with another request is a 409 at once.

What is remembered: a create's answer once it succeeded (any 2xx), and a response as soon as it is stored (in
the transaction that stores it: a retry then attaches to that response, however its first request ends). An
error answer is not: the claim is released, so that a retry (after a 400 is fixed, a 429 or a 503 passes) runs
the create. A claim whose request never finished (its process died) is taken over after
RESPONSES_IDEMPOTENCY_ABANDONED_S; a key whose window ended is a new create."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import IdempotencyKeyRow
from app.errors import Conflict
from app.idempotency import repository
from app.idempotency.header import IDEMPOTENCY_HEADER, KeyedRequest
from app.ids import new_id
from app.runtime import Runtime
from app.secrets.sealer import SealBroken

logger = logging.getLogger(__name__)

#: How often a request waiting on an earlier one with its key looks again (one indexed read each time).
POLL_S = 0.05
#: What the sealed answers are sealed for (with the tenant): a token sealed for something else never opens here.
ANSWER_PURPOSE = "idempotent-answer"


@dataclass(frozen=True, slots=True)
class Claim:
    """This request holds the key: it runs the create, then keeps its answer (remember, bind_response) or
    releases the key (release)."""

    tenant: str
    key: str
    claim_id: str
    #: The id the response this create makes must have (a response create's claim only).
    resource_id: str | None


@dataclass(frozen=True, slots=True)
class Earlier:
    """What the key's first request made: the response it stored (`resource_id`), or its answer."""

    resource_id: str | None
    status_code: int = 200
    body: bytes = b""


def key_reused() -> Conflict:
    # Not worth a retry: the SDKs retry a 409 unless told otherwise.
    return Conflict(
        f"This {IDEMPOTENCY_HEADER} was already used with another request (another body, path or query) within "
        "its window: send a new key for a new request.",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_reused",
        headers={"x-should-retry": "false"},
    )


def key_in_use() -> Conflict:
    return Conflict(
        f"An earlier request with this {IDEMPOTENCY_HEADER} is still running: retry shortly to get its answer.",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_in_use",
        headers={"Retry-After": "1"},
    )


def answer_unreadable() -> Conflict:
    return Conflict(
        f"What the first request with this {IDEMPOTENCY_HEADER} answered can no longer be read (the server's "
        "secret keys changed since): send a new key.",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_unreadable",
        headers={"x-should-retry": "false"},
    )


async def claim_key(
    runtime: Runtime, tenant: str, keyed: KeyedRequest, *, resource_id: str | None = None
) -> Claim | Earlier:
    """Claim the tenant's key for this request (`resource_id`: the id the response it creates will have), or
    what the key's first request made. While that one still runs, wait up to RESPONSES_IDEMPOTENCY_WAIT_S, then
    a 409 `idempotency_key_in_use`; another request with the key is a 409 `idempotency_key_reused`."""
    deadline = time.monotonic() + runtime.settings.idempotency_wait_s
    first = True
    while True:
        outcome = await _try_claim(runtime, tenant, keyed, resource_id, insert_first=first)
        if outcome is not None:
            return outcome
        if time.monotonic() >= deadline:
            raise key_in_use()
        first = False
        await anyio.sleep(POLL_S)


def _claim_values(keyed: KeyedRequest, resource_id: str | None) -> dict[str, object]:
    """A claim's columns but its times, which the database's clock writes (repository)."""
    return {"request_hash": keyed.request_hash, "claim_id": new_id("claim"), "resource_id": resource_id}


async def _try_claim(
    runtime: Runtime, tenant: str, keyed: KeyedRequest, resource_id: str | None, *, insert_first: bool
) -> Claim | Earlier | None:
    """One look at the key: claimed (a new row, or one taken over), what it made, or None while its first request
    runs (or another request won the race to claim it: the next look says what that one made). `insert_first`:
    the first look tries the insert that claims the key at once (a new key, the usual case, is one statement); a
    request waiting on another reads first (a poll that writes would compete with the request it waits for)."""
    database = runtime.database
    window_s = runtime.settings.idempotency_window_hours * 3600
    values = _claim_values(keyed, resource_id)
    claim = Claim(tenant, keyed.key, str(values["claim_id"]), resource_id)

    async def insert() -> bool:
        async with database.transaction() as session:
            keyed_values = {"tenant": tenant, "key": keyed.key, **values}
            return await repository.insert_claim(session, keyed_values, window_s=window_s)

    if insert_first and await insert():
        return claim
    async with database.read() as session:
        state = await repository.get_key(
            session, tenant, keyed.key, abandoned_s=runtime.settings.idempotency_abandoned_s
        )
    if state is None:  # never there, or released since (its request failed)
        return claim if await insert() else None
    row = state.row
    if not state.expired and row.request_hash != keyed.request_hash:
        raise key_reused()
    if state.expired or state.abandoned:
        if state.abandoned:
            logger.warning("taking over an Idempotency-Key whose request never finished (claimed %s)", row.claimed_at)
        async with database.transaction() as session:
            won = await repository.take_over(session, tenant, keyed.key, row.claim_id, values, window_s=window_s)
        return claim if won else None
    if row.state == repository.RUNNING:
        return None
    return _earlier(runtime, row)


def _earlier(runtime: Runtime, row: IdempotencyKeyRow) -> Earlier:
    if row.answer is None:
        return Earlier(row.resource_id)
    try:
        answer = runtime.sealer.open(row.answer, purpose=ANSWER_PURPOSE, tenant=row.tenant)
    except SealBroken:
        raise answer_unreadable() from None
    return Earlier(None, int(answer["status"]), str(answer["body"]).encode())


async def remember(runtime: Runtime, claim: Claim, status_code: int, body: bytes) -> None:
    """Keep what the create answered, sealed for the tenant (it may hold a secret shown once: a key, a signing
        secret). NOTE: in a unit of work after the create's own, so that no service needs to know about keys: a process
        that dies between the two leaves the claim to be taken over, and a retry then runs the create again. A failure
    is logged, not raised: the create's answer still goes to its client."""
    sealed = runtime.sealer.seal(
        {"status": status_code, "body": body.decode()}, purpose=ANSWER_PURPOSE, tenant=claim.tenant
    )
    values = {"answer": sealed, "status_code": status_code}
    try:
        with anyio.CancelScope(shield=True):
            async with runtime.database.transaction() as session:
                kept = await repository.mark_done(session, claim.tenant, claim.key, claim.claim_id, values)
    except Exception as error:
        # The create is made: its client is better served by its answer than by an error that a retry would
        # make a second create of, once the claim is taken over.
        logger.warning("could not keep the answer of an Idempotency-Key's request (%s)", error)
        return
    if not kept:
        logger.warning("an Idempotency-Key was taken over while its request ran past its abandoned time")


async def bind_response(session: AsyncSession, claim: Claim) -> None:
    """In the transaction that stores the claim's response: the key now names it. A 409 (rolling the response
    back) when a retry took the key over meanwhile (this request ran past RESPONSES_IDEMPOTENCY_ABANDONED_S):
    that retry creates it instead."""
    values = {"resource_id": claim.resource_id, "status_code": 200}
    if not await repository.mark_done(session, claim.tenant, claim.key, claim.claim_id, values):
        raise key_in_use()


async def forget_response(session: AsyncSession, claim: Claim) -> None:
    """In the transaction that deletes the claim's response again (its job could not be queued): the key is
    free, for a retry to create it."""
    await repository.delete_claim(session, claim.tenant, claim.key, claim.claim_id, running_only=False)


async def release(runtime: Runtime, claim: Claim) -> None:
    """The create failed before it made anything to remember: forget the key (if this claim still holds it and
    has not answered), so that a retry runs the create. Whole even if the request is being cancelled; a failure
    here is logged (the claim is taken over once abandoned), never raised over the create's own error."""
    with anyio.CancelScope(shield=True):
        try:
            async with runtime.database.transaction() as session:
                await repository.delete_claim(session, claim.tenant, claim.key, claim.claim_id, running_only=True)
        except Exception as error:
            logger.warning("could not release an Idempotency-Key (%s): a retry takes it over later", error)
