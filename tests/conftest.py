"""Fixtures shared by unit and integration tests."""

import os
from urllib.parse import urlsplit

import pytest

from app.end_effects import register_end_effects


def pytest_configure(config: object) -> None:
    """Under pytest-xdist (`-n`), each worker gets a Redis database index of its own (the base index plus its
    number): the tests that use RESPONSES_TEST_REDIS_URL empty and fill theirs, and must not see each other's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    base = urlsplit(os.environ.get("RESPONSES_TEST_REDIS_URL", "redis://127.0.0.1:6379/9"))
    index = int(base.path.strip("/") or 0) + int(worker.removeprefix("gw"))
    os.environ["RESPONSES_TEST_REDIS_URL"] = base._replace(path=f"/{index}").geturl()


@pytest.fixture(autouse=True, scope="session")
def end_effects_registered() -> None:
    """A test may end responses outside a server (an executor or a reconciler of its own): the effects beside
    an end are registered as every server's and worker's start-up registers them."""
    register_end_effects()
