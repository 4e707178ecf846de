"""Idempotency-Key against the real server and model in embedded mode, on SQLite and on Postgres: the openai SDK
with a short timeout and its default retries, whose every try times out, leaves one stored response for a create
sent with a key, and a later call with the key collects that response."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import httpx
import openai
import pytest

from app.testing.servers import ServerProcess

pytestmark = pytest.mark.integration

STORY = "Write a long story about a dragon who learns to bake bread."


def test_an_sdk_create_whose_tries_time_out_is_one_response(model: str, server: ServerProcess) -> None:
    tries = 0

    def count(request: httpx.Request) -> None:
        nonlocal tries
        tries += request.method == "POST"

    case = str(uuid.uuid4())
    body: dict[str, Any] = {
        "model": model,
        "input": STORY,
        "temperature": 0,
        "max_output_tokens": 64,
        "metadata": {"case": case},
    }
    key = {"Idempotency-Key": case}
    hasty = openai.OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="x",
        timeout=0.2,
        max_retries=2,
        http_client=httpx.Client(event_hooks={"request": [count]}),
    )
    with hasty, contextlib.suppress(openai.APITimeoutError):
        hasty.responses.create(**body, extra_headers=key)
    assert tries >= 2  # its first try timed out: 64 tokens take longer (~0.55 s at 115 tokens/s)
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", timeout=600, max_retries=0) as patient:
        response = patient.responses.create(**body, extra_headers=key)
    assert response.status in ("completed", "incomplete") and response.output_text
    found = httpx.get(f"{server.base_url}/v1/responses", params={"metadata[case]": case}, timeout=30).json()["data"]
    assert [stored["id"] for stored in found] == [response.id]
