"""The console's vector store pages in a real browser: the stores with their status and file counts (another
tenant's absent), one store's files with the reason a file failed, and its search box finding a chunk. Screenshots
as in test_console."""

from __future__ import annotations

import io
import time
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.integration

GUIDE = b"# Tomatoes\n\nTomatoes need six hours of direct sun a day and deep watering twice a week.\n"


def settle(client: openai.OpenAI, store_id: str, file_id: str) -> str:
    deadline = time.monotonic() + 60
    status = "in_progress"
    while status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
        status = client.vector_stores.files.retrieve(file_id, vector_store_id=store_id).status
    return status


def test_the_stores_their_files_and_a_search(
    page: Page, client: openai.OpenAI, other_client: openai.OpenAI, screenshots: Path
) -> None:
    store = client.vector_stores.create(name="<i>garden</i>", metadata={"team": "green"})
    guide = client.files.create(file=("guide.md", io.BytesIO(GUIDE)), purpose="assistants")
    broken = client.files.create(file=("photo.bin", io.BytesIO(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")), purpose="assistants")
    for file in (guide, broken):
        client.vector_stores.files.create(vector_store_id=store.id, file_id=file.id)
    assert settle(client, store.id, guide.id) == "completed"
    assert settle(client, store.id, broken.id) == "failed"
    hidden = other_client.vector_stores.create(name="someone else's")

    page.goto("/console/#/vector_stores")
    expect(page.get_by_role("heading", name="Vector stores")).to_be_visible()
    rows = page.get_by_test_id("store-row")
    expect(rows).to_have_count(1)
    # The name is text, not markup; the other tenant's store is not there.
    expect(rows.first.get_by_role("link", name="<i>garden</i>")).to_be_visible()
    expect(page.get_by_text(hidden.name)).to_have_count(0)
    expect(rows.first.get_by_test_id("file-counts")).to_contain_text("1 / 2 indexed (1 failed)")
    expect(rows.first.get_by_test_id("status")).to_have_text("completed")
    page.screenshot(path=screenshots / "vector-stores.png", full_page=True)

    rows.first.get_by_role("link", name="<i>garden</i>").click()
    expect(page.get_by_role("heading", name="Vector store <i>garden</i>")).to_be_visible()
    files = page.get_by_test_id("store-file-row")
    expect(files).to_have_count(2)
    failed = files.filter(has_text=broken.id)
    expect(failed.get_by_test_id("status")).to_have_text("failed")
    expect(failed.get_by_test_id("file-error")).to_contain_text("unsupported_file")
    page.get_by_label("Search query").fill("how much sun do tomatoes need")
    page.get_by_role("button", name="Search").click()
    results = page.get_by_test_id("search-result")
    expect(results).to_have_count(1)
    expect(results.first).to_contain_text("six hours of direct sun")
    expect(results.first).to_contain_text("guide.md")
    page.screenshot(path=screenshots / "vector-store.png", full_page=True)
    page.get_by_label("Search query").fill("zebra")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_test_id("no-results")).to_be_visible()

    page.goto(f"/console/#/vector_stores/{hidden.id}")
    expect(page.get_by_test_id("not-found")).to_be_visible()
