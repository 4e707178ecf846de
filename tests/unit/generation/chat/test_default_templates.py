"""A model without a chat template: its architecture's turns where its vocabulary has their markers, else ChatML,
and a warning at load either way."""

from __future__ import annotations

import logging

import pytest

from app.generation.chat.defaults import CHATML_TEMPLATE, GEMMA_TEMPLATE, default_template
from app.generation.chat.template import ChatTemplate

GEMMA_MARKERS = {"<start_of_turn>", "<end_of_turn>"}


def test_a_gemma_model_gets_gemma_turns_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        chosen = default_template("gemma3", lambda text: text in GEMMA_MARKERS, "gemma")
    assert chosen.source == GEMMA_TEMPLATE
    assert "model gemma has no chat template" in caplog.text and "gemma default" in caplog.text


def test_chatml_where_the_architecture_is_unknown_or_its_markers_are_not_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert default_template("llama", lambda text: True).source == CHATML_TEMPLATE
        assert default_template("gemma3", lambda text: False).source == CHATML_TEMPLATE
    assert caplog.text.count("chatml default") == 2


def test_gemma_turns_render_as_gemma_writes_them() -> None:
    template = ChatTemplate(GEMMA_TEMPLATE, bos_token="<bos>", eos_token="<eos>", add_bos=True)
    text = template.render(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi "},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a fruit."},
        ]
    )
    assert text == (
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nName a fruit.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
