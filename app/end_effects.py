"""What every end of a response does beside its final state, registered with app/lifecycle by each process that
ends responses (the API node, embedded or not, and the worker) before it runs anything: its output items indexed
for item_reference (items), its conversation turn finished (conversations), its usage counted (usage), its webhook
event written to the outbox (webhooks), and its prompt-cache diagnostics (prompt_cache)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.conversations import repository as conversations
from app.conversations import turns
from app.items import repository as items
from app.lifecycle import effects
from app.lifecycle.effects import Effect, Ending
from app.prompt_cache.diagnosis import job_diagnostics
from app.usage import repository as usage
from app.webhooks.outbox import record_response_end


async def index_output_items(session: AsyncSession, ending: Ending) -> None:
    if ending.stored:  # a `store: false` response's items are nowhere to reference
        await items.index_output_items(session, ending.response_id, ending.output)


async def finish_turn(session: AsyncSession, ending: Ending) -> None:
    """Its turn's items appended (if it completed) and its claim ended; with no turn known, the claim it holds on
    any conversation ended (it added nothing: only the run that held it completes a response)."""
    if ending.turn is not None:
        appended = [*ending.turn.input_items, *ending.output]
        await turns.finish(session, ending.turn.conversation_id, ending.response_id, ending.status, appended)
    elif ending.stored:
        await conversations.release_claim_of(session, ending.response_id)


async def count_usage(session: AsyncSession, ending: Ending) -> None:
    entry = usage.entry_of(
        tenant=ending.tenant,
        model=ending.model,
        day=ending.created_at.date(),
        usage=ending.usage,
        generation_s=ending.generation_s,
    )
    await usage.add(session, entry)


async def write_webhook_event(session: AsyncSession, ending: Ending) -> None:
    # A batch line runs as a background response, but nobody asked for its events: its batch's end is announced.
    announced = ending.stored and ending.background and ending.job_class != "batch"
    await record_response_end(
        session, tenant=ending.tenant, response_id=ending.response_id, status=ending.status, background=announced
    )


def register_end_effects() -> None:
    """Register every effect (the same functions each time: a second start in one process changes nothing)."""
    effects.register(Effect.OUTPUT_ITEMS, index_output_items)
    effects.register(Effect.CONVERSATION_TURN, finish_turn)
    effects.register(Effect.USAGE, count_usage)
    effects.register(Effect.WEBHOOK_EVENT, write_webhook_event)
    effects.register_cache_diagnosis(job_diagnostics)
    effects.require_registered()
