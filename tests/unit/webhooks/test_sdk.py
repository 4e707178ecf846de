"""The openai SDK's own `client.webhooks` against the app in-process: every call it has, its pages, and the
receiving side (`unwrap`) on a real delivery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import openai
import pytest
from fastapi import FastAPI

from app.runtime import Runtime
from app.testing.receiver import running_receiver
from app.webhooks.delivery import DeliveryPolicy, WebhookDeliverer
from app.webhooks.event_types import EVENT_TYPES

pytestmark = pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=3600)


@pytest.fixture
async def sdk(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    http = openai.DefaultAsyncHttpxClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http) as client:
        yield client


async def test_every_webhooks_call_of_the_sdk(sdk: openai.AsyncOpenAI, app_runtime: Runtime) -> None:
    with running_receiver() as receiver:
        made = await sdk.webhooks.create(name="sdk", url=receiver.url, event_types=["response.completed"])
        assert made.signing_secret.startswith("whsec_") and made.url == receiver.url
        others = [
            await sdk.webhooks.create(name=f"other {index}", url="https://example.com/h", event_types=["batch.failed"])
            for index in range(2)
        ]
        assert (await sdk.webhooks.retrieve(made.id)).name == "sdk"
        updated = await sdk.webhooks.update(made.id, name="renamed", event_types=["response.completed", "batch.failed"])
        assert updated.name == "renamed" and updated.event_types == ["response.completed", "batch.failed"]
        listed = [endpoint.id async for endpoint in sdk.webhooks.list(limit=1)]  # three pages, by cursor
        assert listed == [others[1].id, others[0].id, made.id]
        assert (await sdk.webhooks.event_types.list()).data == list(EVENT_TYPES)

        rotated = await sdk.webhooks.rotate_secret(made.id, keep_old_secret_active_for_24_hours=True)
        assert rotated.signing_secret != made.signing_secret
        tested = await sdk.webhooks.test(made.id, event_type="response.completed")
        assert tested.status_code == 200 and tested.success is True and tested.webhook_endpoint_id == made.id

        response = await sdk.responses.create(model="fake-model", input="hi", background=True)
        while response.status in ("queued", "in_progress"):
            await asyncio.sleep(0.02)
            response = await sdk.responses.retrieve(response.id)
        sender = WebhookDeliverer(
            app_runtime.database, app_runtime.sealer, app_runtime.settings, DeliveryPolicy(retry_window_s=60)
        )
        assert await sender.run_round() == 1
        delivered = receiver.requests[-1]
    for secret in (made.signing_secret, rotated.signing_secret):
        event = sdk.webhooks.unwrap(delivered.body, delivered.headers, secret=secret)
        assert event.type == "response.completed" and event.data.id == response.id

    deleted = await sdk.webhooks.delete(made.id)
    assert deleted.deleted is True and deleted.id == made.id
    with pytest.raises(openai.NotFoundError):
        await sdk.webhooks.retrieve(made.id)
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.webhooks.create(name="x", url="http://169.254.169.254/", event_types=["response.completed"])
    assert refused.value.param == "url"  # type: ignore[attr-defined]
