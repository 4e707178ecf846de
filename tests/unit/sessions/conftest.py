"""The `setup` fixture of the WebSocket session tests: a fresh SQLite app on the fake model; a test's
`@pytest.mark.settings(...)` adds settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.sessions.fake_app import Setup


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Setup]:
    marker = request.node.get_closest_marker("settings")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}",
        model_id="fake-model",
        _env_file=None,
        **(marker.kwargs if marker else {}),
    )
    renderer, runner = FakeRenderer(), FakeRunner()
    with TestClient(create_app(settings, fake_generation(renderer, runner))) as client:
        yield Setup(client, renderer, runner)
