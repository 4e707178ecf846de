"""The chat tokenizer on the shipped model's vocabulary: the opening of the assistant's turn it reads off the chat
template (what a warm-up's prompt-cache fingerprint leaves out), and none for a template that writes none."""

from __future__ import annotations

import pytest

from app.config import Settings
from app.generation.prompt import ChatMessage, ToolCall
from app.generation.tokenizer import ChatTokenizer
from app.generation.types import ContextTooLong
from app.testing.llama_cpp.server import llama_cpp_source

pytestmark = pytest.mark.integration


def test_the_opening_of_the_assistant_turn_ends_every_render() -> None:
    tokenizer = ChatTokenizer(Settings(_env_file=None).resolved_model_path, n_ctx=512)
    opening = list(tokenizer.generation_prompt_tokens)
    assert len(tokenizer.tokenize("<|im_start|>assistant\n", special=True)) == len(opening)
    for conversation in (
        [ChatMessage("user", "Hi")],
        [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello.")],
    ):
        assert tokenizer.render(conversation)[-len(opening) :] == opening


def test_a_template_without_an_opening_has_none() -> None:
    template = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    tokenizer = ChatTokenizer(Settings(_env_file=None).resolved_model_path, n_ctx=512, chat_template=template)
    assert tokenizer.generation_prompt_tokens == ()


def test_a_kv_pool_smaller_than_the_context_bounds_the_prompt() -> None:
    """A prompt that fits the model's context but not the pool is refused up front (a 400), not run into an
    answer the pool has no room for."""
    path = Settings(_env_file=None).resolved_model_path
    assert ChatTokenizer(path, n_ctx=None, kv_pool_tokens=0).n_ctx == 8192
    assert ChatTokenizer(path, n_ctx=None, kv_pool_tokens=32768).n_ctx == 8192
    pooled = ChatTokenizer(path, n_ctx=None, kv_pool_tokens=256)
    assert pooled.n_ctx == 256
    with pytest.raises(ContextTooLong):
        pooled.render_within_context(None, [ChatMessage("user", "word " * 300)], truncate=False)


def test_a_truncated_conversation_on_a_template_that_renders_calls_starts_at_a_user_turn() -> None:
    """Qwen3's template refuses a tool result whose call went with the dropped messages: a window opens on a user
    turn, and the newest ones that fit are kept."""
    source = (llama_cpp_source() / "models" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    tokenizer = ChatTokenizer(Settings(_env_file=None).resolved_model_path, n_ctx=200, chat_template=source)
    assert tokenizer.structured
    turn = [
        ChatMessage("user", "Weather? " + "word " * 30),
        ChatMessage("assistant", "", (ToolCall("c1", "weather", '{"city": "Paris"}'),)),
        ChatMessage("tool", "18 C " + "word " * 30, tool_call_id="c1", name="weather"),
        ChatMessage("assistant", "It is 18 C."),
    ]
    tokens = tokenizer.render_within_context(None, [*turn, *turn, ChatMessage("user", "And now?")], truncate=True)
    text = tokenizer._vocab.detokenize(tokens, special=True).decode()
    assert text.startswith("<|im_start|>user\n") and text.count("<tool_response>") <= 1
    assert text.endswith("And now?<|im_end|>\n<|im_start|>assistant\n")
