"""A conversation the model's chat template refuses (Mistral's "conversation roles must alternate", Llama 3.1's
one call at a time) is a 400 that names the model, what the conversation holds and the template's words, on a
create and on an input token count; never a 500."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from app.generation.chat.template import TemplateRenderError
from app.generation.prompt import ChatMessage
from app.testing.fakes import FakeRenderer


def refusing(renderer: FakeRenderer, monkeypatch: pytest.MonkeyPatch) -> None:
    def render_within_context(
        system: ChatMessage | None,
        conversation: Sequence[ChatMessage],
        *,
        truncate: bool,
        template_options: Mapping[str, Any] | None = None,
    ) -> list[int]:
        raise TemplateRenderError("This model only supports single tool-calls at once!")

    monkeypatch.setattr(renderer, "render_within_context", render_within_context)


async def test_a_refused_conversation_is_a_400_naming_the_model_and_the_case(
    client: httpx.AsyncClient, renderer: FakeRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusing(renderer, monkeypatch)
    body = {
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
            {"type": "function_call_output", "call_id": "c2", "output": "24 C"},
        ],
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}],
    }
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        reply = await client.post(path, json=body)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["code"] == "unsupported_conversation" and error["param"] == "input"
        assert "'fake-model'" in error["message"]
        assert "This model only supports single tool-calls at once!" in error["message"]
