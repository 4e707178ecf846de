"""The console's webhook and batch pages, and an admin's project chooser, in a real browser: an endpoint created
from the page shows its signing secret once and then its deliveries (a real receiver gets them); test, disable,
rotate and delete from the endpoint's page; a batch uploaded through the API shows its progress and links to its
output file's content; an admin key picks a project and reads that project's responses. Screenshots as in
test_console."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import httpx
import openai
import pytest
from playwright.sync_api import Page, expect

from app.testing.receiver import running_receiver
from app.testing.servers import ServerProcess, sdk_client
from tests.browser.conftest import KEY

pytestmark = pytest.mark.integration

WAIT_MS = 60_000


def test_a_webhook_endpoint_is_created_shows_its_secret_once_and_its_deliveries(
    page: Page, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    with running_receiver() as receiver:
        page.goto("/console/#/webhooks")
        expect(page.get_by_role("heading", name="Webhook endpoints")).to_be_visible()
        page.get_by_label("Name").fill("<b>receiver</b>")
        page.get_by_label("URL").fill(receiver.url)
        # A reply cut at max_output_tokens ends `incomplete`: its event too.
        page.get_by_label("response.incomplete").check()
        page.get_by_role("button", name="Create endpoint").click()
        secret = page.get_by_test_id("signing-secret")
        expect(secret).to_contain_text("whsec_")
        shown = secret.inner_text()
        rows = page.get_by_test_id("endpoint-row")
        expect(rows).to_have_count(1)
        # The name is text, not markup.
        expect(rows.first.get_by_role("link", name="<b>receiver</b>")).to_be_visible()
        page.screenshot(path=screenshots / "webhooks-created.png", full_page=True)
        # Once: a reload (or any other page) has only its hint.
        page.reload()
        expect(rows).to_have_count(1)
        expect(page.get_by_test_id("signing-secret")).to_have_count(0)
        expect(rows.first).to_contain_text(shown[-4:])
        expect(page.get_by_text(shown)).to_have_count(0)

        created = client.responses.create(model=model, input="Say hi.", background=True, max_output_tokens=16)
        deadline = time.monotonic() + WAIT_MS / 1000
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.2)
        assert receiver.requests, "no delivery reached the receiver"
        assert json.loads(receiver.requests[0].body)["data"]["id"] == created.id

        rows.first.get_by_role("link").click()
        expect(page.get_by_role("heading", name="Webhook endpoint")).to_be_visible()
        delivery = page.get_by_test_id("delivery-row")
        expect(delivery).to_have_count(1)
        expect(delivery.first).to_contain_text(re.compile(r"response\.(completed|incomplete)"))
        expect(delivery.first.get_by_role("link", name=created.id)).to_be_visible()
        expect(delivery.first.get_by_test_id("status")).to_have_text("delivered")
        page.screenshot(path=screenshots / "webhook-endpoint.png", full_page=True)

        page.get_by_label("Test event type").select_option("batch.completed")
        page.get_by_role("button", name="Send test event").click()
        expect(page.get_by_test_id("test-result")).to_contain_text("answered 200")
        assert json.loads(receiver.requests[-1].body)["type"] == "batch.completed"

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Rotate secret").click()
        expect(page.get_by_test_id("signing-secret")).to_contain_text("whsec_")
        assert page.get_by_test_id("signing-secret").inner_text() != shown

        page.get_by_role("button", name="Disable").click()
        expect(page.get_by_test_id("status").first).to_have_text("disabled")
        page.get_by_role("button", name="Enable").click()
        expect(page.get_by_test_id("status").first).to_have_text("enabled")

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Delete").click()
        expect(page.get_by_test_id("deleted")).to_be_visible()
        assert client.webhooks.list().data == []


def test_a_batch_shows_its_progress_and_links_to_its_output(
    page: Page, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    lines = [
        {
            "custom_id": f"line-{index}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": model, "input": "Say hi.", "max_output_tokens": 16},
        }
        for index in range(3)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")

    page.goto(f"/console/#/batches/{batch.id}")
    expect(page.get_by_role("heading", name=f"Batch {batch.id}")).to_be_visible()
    # The page follows the batch until it ends.
    expect(page.get_by_test_id("status").first).to_have_text("completed", timeout=WAIT_MS * 3)
    expect(page.get_by_test_id("progress")).to_contain_text("3 / 3")
    page.screenshot(path=screenshots / "batch.png", full_page=True)

    page.goto("/console/#/batches")
    row = page.get_by_test_id("batch-row").filter(has_text=batch.id)
    expect(row.get_by_test_id("status")).to_have_text("completed")
    expect(row.locator("progress")).to_have_attribute("value", "3")
    page.screenshot(path=screenshots / "batches.png", full_page=True)
    row.get_by_test_id("output-file").click()
    content = page.get_by_test_id("file-content")
    for index in range(3):
        expect(content).to_contain_text(f'"custom_id":"line-{index}"')
    page.screenshot(path=screenshots / "batch-output.png", full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download").click()
    saved = Path(download.value.path())
    assert saved.read_bytes() == client.files.content(client.batches.retrieve(batch.id).output_file_id).content


def test_a_running_batch_can_be_cancelled_from_the_list(page: Page, client: openai.OpenAI, model: str) -> None:
    lines = [
        {
            "custom_id": f"long-{index}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": model, "input": "Tell a long story.", "max_output_tokens": 2000},
        }
        for index in range(20)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = client.files.create(file=("long.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")
    page.goto("/console/#/batches")
    row = page.get_by_test_id("batch-row").filter(has_text=batch.id)
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Cancel").click()
    expect(row.get_by_test_id("status")).to_have_text(re.compile("^cancell(ing|ed)$"), timeout=WAIT_MS)
    deadline = time.monotonic() + 120
    while client.batches.retrieve(batch.id).status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.batches.retrieve(batch.id).status == "cancelled"


def test_an_admin_key_chooses_a_project_and_reads_its_responses(
    page: Page, server: ServerProcess, model: str, screenshots: Path
) -> None:
    made = httpx.post(
        f"{server.base_url}/v1/keys",
        json={"project": "console-alpha", "name": "web"},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert made.status_code == 200, made.text
    member = made.json()
    with sdk_client(server.base_url, member["value"]) as alpha:
        theirs = alpha.responses.create(model=model, input="Name a fruit.", max_output_tokens=16)
    page.reload()
    expect(page.get_by_role("link", name=theirs.id)).to_have_count(0)  # the admin's own data first
    chooser = page.get_by_label("Project")
    expect(chooser).to_be_visible()
    chooser.select_option(member["project_id"])
    expect(page.get_by_role("link", name=theirs.id)).to_be_visible()
    page.screenshot(path=screenshots / "project-chosen.png", full_page=True)
    page.get_by_role("link", name=theirs.id).click()
    expect(page.get_by_role("heading", name=f"Response {theirs.id}")).to_be_visible()
    chooser.select_option(index=0)
    expect(page.get_by_test_id("not-found")).to_be_visible()

    # A member key sees no chooser, and its own project's data.
    page.get_by_role("button", name="Forget key").click()
    page.get_by_label("API key").fill(member["value"])
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("heading", name=f"Response {theirs.id}")).to_be_visible()
    expect(page.locator("#project")).to_be_hidden()
    page.goto("/console/#/responses")
    expect(page.get_by_role("link", name=theirs.id)).to_be_visible()
    expect(page.locator("#project")).to_be_hidden()
