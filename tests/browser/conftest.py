"""A real server (real model, keys set) and headless Chromium from Debian's packages driven by Playwright
(Playwright cannot download its own browsers here: it is pointed at the system's executable)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from app.testing.databases import sqlite_url
from app.testing.servers import ServerProcess, sdk_client

pytestmark = pytest.mark.integration

KEY, OTHER_KEY = "console-key", "someone-elses-key"


def chromium_path() -> str:
    """RESPONSES_TEST_CHROMIUM, else Debian's chromium on PATH (`apt-get install chromium`; .ci/run does)."""
    path = os.environ.get("RESPONSES_TEST_CHROMIUM") or shutil.which("chromium")
    assert path, "no chromium: apt-get install -y chromium (or set RESPONSES_TEST_CHROMIUM)"
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Stopped with the module: the rest of the suite does not share a model-holding process with it."""
    directory = tmp_path_factory.mktemp("console")
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_API_KEYS": f"{KEY},{OTHER_KEY}",
        # The webhook pages' tests deliver to a receiver on loopback.
        "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
    }
    process = ServerProcess(env, directory / "server.log").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk_client(server.base_url, KEY) as made:
        yield made


@pytest.fixture(scope="module")
def other_client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk_client(server.base_url, OTHER_KEY) as made:
        yield made


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


# NOTE: module scope, not session: Playwright's sync API keeps an event loop running while it is open, and
# the async tests that pytest runs after this folder could not start theirs.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox will not start.
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each page's screenshot goes: RESPONSES_TEST_SCREENSHOTS (a CI artefact), else a temporary folder."""
    chosen = os.environ.get("RESPONSES_TEST_SCREENSHOTS")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    """A fresh browser tab (its own sessionStorage) with the API key entered once, on the responses list."""
    context = browser.new_context(base_url=server.base_url, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.goto("/console")
    tab.get_by_label("API key").fill(KEY)
    tab.get_by_role("button", name="Use this key").click()
    tab.get_by_role("heading", name="Responses").wait_for()
    yield tab
    context.close()
