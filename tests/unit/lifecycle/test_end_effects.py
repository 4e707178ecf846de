"""The effects beside a response's end are registered at start-up: a process missing one fails to start, and an
end never runs with one missing (it fails, rolled back, rather than skip it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.config import Settings
from app.end_effects import register_end_effects
from app.lifecycle import effects
from app.lifecycle.effects import Effect, EndEffect, EndEffectsMissing, Ending
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


def test_the_start_up_registration_registers_every_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(effects, "_effects", {})
    monkeypatch.setattr(effects, "_diagnoses", [])
    assert effects.missing() != []
    register_end_effects()
    assert effects.missing() == []


async def test_a_server_whose_start_up_misses_an_effect_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(effects, "_effects", {})
    register = effects.register

    def all_but_the_webhook_event(effect: Effect, run: EndEffect) -> None:
        if effect is not Effect.WEBHOOK_EVENT:
            register(effect, run)

    monkeypatch.setattr(effects, "register", all_but_the_webhook_event)
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}", model_id="m", _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    with pytest.raises(EndEffectsMissing, match="webhook event"):
        async with app.router.lifespan_context(app):
            pass


async def test_an_end_with_an_effect_missing_fails_rather_than_skip_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    async def index(session: object, ending: Ending) -> None:
        ran.append(ending.response_id)

    monkeypatch.setattr(effects, "_effects", {Effect.OUTPUT_ITEMS: index})
    ending = Ending(
        response_id="resp_x",
        tenant="t",
        model="m",
        status="completed",
        output=[],
        usage=None,
        created_at=datetime.now(UTC),
        stored=True,
        background=False,
        job_class=None,
        turn=None,
    )
    with pytest.raises(EndEffectsMissing, match="conversation turn"):
        await effects.run_effects(None, ending)  # type: ignore[arg-type]
    assert ran == [], "no effect runs unless every one does"
