"""One model's chat template: compiled once, its capabilities found, and conversations rendered as llama-server
`--jinja` renders them (the messages adapted as llama.cpp adapts them, the variables it gives every template)."""

from __future__ import annotations

import copy
import hashlib
import itertools
import string
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2

from app.generation.chat.adaptation import adapt_messages, is_gemma4
from app.generation.chat.capabilities import TemplateCaps, detect_caps, preserved_reasoning
from app.generation.chat.environment import TemplateRaised, compile_template


class TemplateLoadError(ValueError):
    """The template cannot be used at all: it does not compile, or it cannot render one user message."""


class TemplateRenderError(ValueError):
    """The template cannot render this conversation (it refused it, or failed on it)."""


def default_variables(now: datetime | None = None) -> dict[str, Any]:
    """What llama-server gives every template beyond the messages (common_chat_extra_context, and its default
    `preserve_reasoning: true`): today's date in two forms, and reasoning kept in the history."""
    now = now or datetime.now()
    return {
        "datetime": now.strftime("%b %d %Y"),
        "date_string": now.strftime("%d %b %Y"),
        "preserve_reasoning": True,
        **preserved_reasoning(True),
    }


def reasoning_variables(effort: str | None) -> dict[str, Any]:
    """The template variables a request's `reasoning.effort` sets, for whichever a template reads: llama-server's
    mapping (`reasoning_effort` and its alias `reasoning_strength`; "none" turns `enable_thinking` off) and the
    switch DeepSeek V3.x and Granite read (`thinking`). No effort: none of them (each template's default, with
    `enable_thinking` on as llama-server gives it)."""
    if effort is None:
        return {}
    if effort == "none":
        return {"enable_thinking": False, "thinking": False}
    return {"enable_thinking": True, "thinking": True, "reasoning_effort": effort, "reasoning_strength": effort}


def conversation_case(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a conversation holds that templates refuse, in words (a 400 names it)."""
    roles = [message.get("role") for message in messages]
    found = [
        ("parallel tool calls", any(len(message.get("tool_calls") or ()) > 1 for message in messages)),
        ("tool calls", any(message.get("tool_calls") for message in messages)),
        ("tool outputs", "tool" in roles),
        ("reasoning", any(message.get("reasoning_content") for message in messages)),
        ("a system message", "system" in roles or "developer" in roles),
        ("consecutive turns of one role", any(a == b for a, b in itertools.pairwise(roles))),
    ]
    return ", ".join(name for name, present in found if present) or "plain turns"


_ALPHANUMERIC = string.ascii_letters + string.digits


def short_call_id(call_id: str) -> str:
    """A call id as 9 letters and digits, the same for the same id (a prompt's prefix stays the same)."""
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    letters = []
    for _ in range(9):
        number, index = divmod(number, len(_ALPHANUMERIC))
        letters.append(_ALPHANUMERIC[index])
    return "".join(letters)


def _shorten_call_ids(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        for call in message.get("tool_calls") or ():
            if call.get("id"):
                call["id"] = short_call_id(call["id"])
        if message.get("tool_call_id"):
            message["tool_call_id"] = short_call_id(message["tool_call_id"])


def _join_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive user turns as one, and consecutive assistant turns of text (our convention's calls) as one,
    their texts a blank line apart."""
    joined: list[dict[str, Any]] = []
    for message in messages:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and previous.get("role") == message.get("role")
            and message.get("role") in ("user", "assistant")
            and isinstance(previous.get("content"), str)
            and isinstance(message.get("content"), str)
            and not previous.get("tool_calls")
            and not message.get("tool_calls")
        ):
            previous["content"] = f"{previous['content']}\n\n{message['content']}"
        else:
            joined.append(message)
    return joined


class ChatTemplate:
    """A template and the tokens around it (the vocabulary's BOS and EOS texts, and whether the tokenizer adds
    them itself: then a render's own leading BOS and trailing EOS are dropped, as llama.cpp drops them)."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", add_bos: bool = False) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.add_bos = add_bos
        try:
            self._template = compile_template(source)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateLoadError(f"the chat template does not compile: {error} (line {error.lineno})") from None
        self.caps: TemplateCaps = detect_caps(source)
        self.short_call_ids = False
        try:
            self.render([{"role": "user", "content": "test"}])
        except TemplateRenderError as error:
            raise TemplateLoadError(f"the chat template cannot render one user message: {error}") from None
        self.short_call_ids = self._wants_short_call_ids()
        self.alternating = self._wants_alternation()

    def _wants_alternation(self) -> bool:
        """Whether the template refuses two user turns in a row (Mistral's, Gemma 2's): then consecutive turns of
        one role are joined into one (a compaction summary is a user turn after the user turns it kept)."""
        try:
            self.render([{"role": "user", "content": "A"}, {"role": "user", "content": "B"}])
        except TemplateRenderError:
            return True
        return False

    def _wants_short_call_ids(self) -> bool:
        """Whether the template refuses our call ids (`call_` and 24 more) but takes 9 letters and digits, as
        Mistral's do: then every call id it gets is shortened so (short_call_id)."""
        if not self.caps.supports_tool_calls:
            return False

        def call(call_id: str) -> list[dict[str, Any]]:
            function = {
                "name": "tool1",
                "arguments": {"arg": "value"} if self.caps.supports_object_arguments else '{"arg": "value"}',
            }
            return [
                {"role": "user", "content": "User message"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": function, "id": call_id}],
                },
                {"role": "tool", "content": "Tool response", "tool_call_id": call_id},
            ]

        try:
            self.render(call("call_" + "0" * 24))
        except TemplateRenderError:
            try:
                self.render(call("call00001"))
            except TemplateRenderError:
                return False
            return True
        return False

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        variables: Mapping[str, Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt text of `messages` (Chat Completions messages), `tools` (function specs) and the template's
        own variables, as common_chat_templates_apply makes it. TemplateRenderError when the template refuses."""
        given = [copy.deepcopy(dict(message)) for message in messages]
        if self.short_call_ids:
            _shorten_call_ids(given)
        if getattr(self, "alternating", False):
            given = _join_turns(given)
        adapted = adapt_messages(given, self.source, self.caps)
        context: dict[str, Any] = {
            "messages": adapted,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "enable_thinking": True,
            **default_variables(),
            **(variables or {}),
        }
        if tools:
            context["tools"] = copy.deepcopy(list(tools))
        if add_generation_prompt:
            context["add_generation_prompt"] = True
        try:
            text = self._template.render(**context)
        except TemplateRaised as error:
            raise TemplateRenderError(str(error)) from None
        except Exception as error:  # whatever a foreign template fails with is its refusal
            raise TemplateRenderError(f"{type(error).__name__}: {error}") from None
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token) :]
        if add_generation_prompt and is_gemma4(self.source) and text.endswith("<turn|>\n"):
            # llama.cpp's: a model turn that ended with calls and text is not reopened by the template.
            text += "<|turn>model\n"
        return text
