"""What the WebSocket session tests share: the in-process app on the fake model, and the statuses that end a
response's events."""

from __future__ import annotations

from starlette.testclient import TestClient

from app.testing.fakes import FakeRenderer, FakeRunner

TERMINAL = {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}


class Setup:
    """The test client of an app on the fake model, and the fake's renderer and runner (to script what it says)."""

    def __init__(self, client: TestClient, renderer: FakeRenderer, runner: FakeRunner) -> None:
        self.client, self.renderer, self.runner = client, renderer, runner
