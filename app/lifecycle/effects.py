"""What must happen beside a response's end, whoever ends it: the effects the domains that own them register at
start-up (app/end_effects.py), run in the unit of work that commits the end. An effect missing is an error (at
start-up, and at any end), never an effect silently skipped."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The conversation a response ran on, and the input its turn adds to it before its output."""

    conversation_id: str
    input_items: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Ending:
    """A response that ended in this unit of work, as every effect reads it."""

    response_id: str
    tenant: str
    model: str
    status: str
    output: list[dict[str, Any]]
    #: Response-shaped, as JSON; None when it ended with none (failed, or never ran).
    usage: dict[str, Any] | None
    created_at: datetime
    #: It has a row (`store: true`); a `store: false` response's end has only the effects that need none.
    stored: bool
    background: bool
    job_class: str | None
    #: Its conversation, when the job that ends it knows it; None for one on no conversation, or (a reconciler's
    #: end of a foreground job, whose payload its claim dropped) for one whose claim finds it.
    turn: TurnEnd | None
    #: How long the run that ended it generated (0 when nobody was running it).
    generation_s: float = 0.0


#: An effect: what its domain does beside an end, in the end's unit of work.
EndEffect = Callable[[AsyncSession, Ending], Awaitable[None]]
#: A job's prompt_cache_diagnostics from its request's comparison and (input, cached) tokens (None: no usage).
CacheDiagnosis = Callable[[dict[str, Any] | None, tuple[int, int] | None], dict[str, Any] | None]


class Effect(enum.Enum):
    """The effects every end runs, in this order."""

    OUTPUT_ITEMS = "its output items indexed for item_reference"
    CONVERSATION_TURN = "its conversation turn finished"
    USAGE = "its usage added to its tenant's day"
    WEBHOOK_EVENT = "its webhook event written to the outbox"


class EndEffectsMissing(RuntimeError):
    """A process ends responses without every effect registered."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"a response's end would skip what its domains register: {', '.join(missing)}")


#: Filled at start-up (app/end_effects.register_end_effects), the same functions for every app in a process.
_effects: dict[Effect, EndEffect] = {}
_diagnoses: list[CacheDiagnosis] = []


def register(effect: Effect, run: EndEffect) -> None:
    _effects[effect] = run


def register_cache_diagnosis(diagnose: CacheDiagnosis) -> None:
    _diagnoses[:] = [diagnose]


def missing() -> list[str]:
    names = [effect.value for effect in Effect if effect not in _effects]
    return names if _diagnoses else [*names, "its prompt-cache diagnostics"]


def require_registered() -> None:
    """At start-up (the app's, the worker's): EndEffectsMissing if an effect is not registered."""
    if names := missing():
        raise EndEffectsMissing(names)


async def run_effects(session: AsyncSession, ending: Ending) -> None:
    require_registered()
    for effect in Effect:
        await _effects[effect](session, ending)


def diagnose_cache(comparison: dict[str, Any] | None, usage: tuple[int, int] | None) -> dict[str, Any] | None:
    """The end's prompt_cache_diagnostics (set on the Response before its final events are built)."""
    require_registered()
    return _diagnoses[0](comparison, usage)
