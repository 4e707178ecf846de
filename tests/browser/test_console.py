"""The web console in a real browser, as a person uses it: the key entered once, the responses list and its
filters, a response page (input, output, usage, chain, raw JSON), a conversation, the live view of a running
background stream with its cancel button, delete, and 404 pages for unknown and foreign ids. Each page's
screenshot is saved (see conftest.screenshots)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from playwright.sync_api import Page, expect

from app.testing.cluster import STORY

pytestmark = pytest.mark.integration

WAIT_MS = 60_000


def test_a_person_browses_responses_and_their_chain(
    page: Page, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    first = client.responses.create(
        model=model, input="Name a colour.", max_output_tokens=16, metadata={"suite": "console"}
    )
    second = client.responses.create(
        model=model, input="And another one.", previous_response_id=first.id, max_output_tokens=16
    )
    page.reload()
    rows = page.get_by_test_id("response-row")
    expect(rows.first).to_contain_text(second.id)  # newest first
    expect(page.get_by_role("link", name=first.id)).to_be_visible()
    page.screenshot(path=screenshots / "responses.png", full_page=True)

    page.get_by_label("Metadata key=value").fill("suite=console")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(first.id)
    page.screenshot(path=screenshots / "responses-filtered.png", full_page=True)

    page.goto(f"/console/#/responses/{second.id}")
    expect(page.get_by_role("heading", name=f"Response {second.id}")).to_be_visible()
    expect(page.get_by_test_id("input-items")).to_contain_text("And another one.")
    expect(page.get_by_test_id("output")).to_contain_text(second.output_text.strip()[:20])
    assert second.usage is not None
    expect(page.get_by_test_id("usage")).to_contain_text(f"Total tokens{second.usage.total_tokens}")
    turns = page.get_by_test_id("chain-turn")
    expect(turns).to_have_count(2)
    expect(turns.nth(0)).to_contain_text(first.id)
    expect(turns.nth(1)).to_contain_text(second.id)
    expect(page.get_by_test_id("raw")).to_contain_text(f'"previous_response_id": "{first.id}"')
    page.screenshot(path=screenshots / "response.png", full_page=True)

    # The earlier turn's page shows the chain after it.
    turns.nth(0).get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"Response {first.id}")).to_be_visible()
    expect(page.get_by_test_id("chain-turn").nth(1)).to_contain_text(second.id)


def test_a_conversation_page_shows_its_items(page: Page, client: openai.OpenAI, model: str, screenshots: Path) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "Remember the word pumpkin."}])
    used = client.responses.create(model=model, input="What word?", conversation=conversation.id, max_output_tokens=16)
    page.goto(f"/console/#/responses/{used.id}")
    page.get_by_role("link", name=conversation.id).click()
    expect(page.get_by_role("heading", name=f"Conversation {conversation.id}")).to_be_visible()
    items = page.get_by_test_id("conversation-items").get_by_test_id("item")
    expect(items).to_have_count(3)
    expect(items.nth(0)).to_contain_text("Remember the word pumpkin.")
    expect(items.nth(1)).to_contain_text("What word?")
    page.screenshot(path=screenshots / "conversation.png", full_page=True)


def test_unknown_and_foreign_ids_are_404_pages(
    page: Page, other_client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    theirs = other_client.responses.create(model=model, input="Hi.", max_output_tokens=16)
    paths = (f"#/responses/{theirs.id}", "#/responses/resp_nope", "#/conversations/conv_nope", "#/nowhere")
    # A malformed escape in the address is a page that does not exist too (it once left a blank page).
    for path in (*paths, "#/responses/%"):
        page.goto(f"/console/{path}")
        expect(page.get_by_test_id("not-found")).to_be_visible()
        expect(page.get_by_text("Pumpkin")).to_have_count(0)
    page.screenshot(path=screenshots / "not-found.png", full_page=True)
    # Nor does another tenant's response appear in the list.
    page.goto("/console/#/responses")
    expect(page.get_by_role("heading", name="Responses")).to_be_visible()
    expect(page.get_by_role("link", name=theirs.id)).to_have_count(0)


def test_live_view_follows_a_running_stream_then_cancel_and_delete(
    page: Page, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    with client.responses.create(
        model=model, input=STORY, background=True, stream=True, max_output_tokens=2000, temperature=0.8
    ) as stream:
        response_id = next(iter(stream)).response.id  # response.created; the generation goes on without us
    page.goto(f"/console/#/responses/{response_id}/live")
    text = page.get_by_test_id("live-text")
    expect(text).not_to_be_empty(timeout=WAIT_MS)
    expect(page.get_by_test_id("live-status")).to_contain_text("in_progress")
    page.screenshot(path=screenshots / "live.png", full_page=True)

    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("live-status")).to_contain_text("cancelled", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    page.screenshot(path=screenshots / "live-cancelled.png", full_page=True)
    stored = client.responses.retrieve(response_id)
    assert stored.status == "cancelled"

    page.goto(f"/console/#/responses/{response_id}")
    expect(page.get_by_test_id("status").first).to_have_text("cancelled")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_test_id("deleted")).to_contain_text(response_id)
    page.screenshot(path=screenshots / "deleted.png", full_page=True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response_id)


def test_live_view_of_a_response_created_without_stream_says_so_and_can_cancel(
    page: Page, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    created = client.responses.create(
        model=model, input=STORY, background=True, max_output_tokens=2000, temperature=0.8
    )
    page.goto(f"/console/#/responses/{created.id}/live")
    expect(page.get_by_test_id("live-unstreamed")).to_contain_text("created without stream: true")
    page.screenshot(path=screenshots / "live-unstreamed.png", full_page=True)
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("live-status")).to_contain_text("cancelled", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    assert client.responses.retrieve(created.id).status == "cancelled"
