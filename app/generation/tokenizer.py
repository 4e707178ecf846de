"""Chat messages -> prompt tokens, with the model's own chat template rendered as llama-server `--jinja` renders it
(app/generation/chat), from a vocabulary-only llama.cpp load; text in the messages is never read as a control
token (chat/control_tokens.py)."""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from app.generation.chat.control_tokens import ControlTexts, Vocabulary, tokenize_shielded
from app.generation.chat.defaults import default_template
from app.generation.chat.template import ChatTemplate
from app.generation.dialects.detection import detect_syntax
from app.generation.prompt import ChatMessage
from app.generation.registry import ModelSpec
from app.generation.types import MIN_OUTPUT_TOKENS, ContextTooLong

DEFAULT_REASONING_TAGS = ("<think>", "</think>")
#: The token attributes llama.cpp reads only with special tokens parsed (the others, user-defined tokens such as
#: Qwen's `<tool_call>`, it reads in any text).
_CONTROL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN


def parse_reasoning_tags(setting: str | None, template: str) -> tuple[str, str] | None:
    """The reasoning markers: the setting's 'open,close' (or 'none'), else <think> when the template uses it."""
    if setting is None:
        return DEFAULT_REASONING_TAGS if DEFAULT_REASONING_TAGS[0] in template else None
    if setting.strip().lower() == "none":
        return None
    opening, _, closing = setting.partition(",")
    if not opening.strip() or not closing.strip():
        raise ValueError(f"RESPONSES_REASONING_TAGS must be 'open,close' or 'none', not {setting!r}")
    return opening.strip(), closing.strip()


class ChatTokenizer:
    """Renders conversations deterministically (same messages -> same tokens), so prefixes repeat across turns.

    Thread-safe for rendering: a vocabulary-only model has no context and no mutable state.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int | None,
        reasoning_tags: str | None = None,
        chat_template: str | None = None,
        kv_pool_tokens: int = 0,
        tool_format: str | None = None,
        reasoning_format: str | None = None,
        model: str = "",
    ) -> None:
        self._vocab = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
        metadata = self._vocab.metadata
        # A vocabulary-only load reports no trained context; the GGUF metadata has it.
        trained = int(metadata.get(f"{metadata.get('general.architecture', 'llama')}.context_length", 0))
        self.n_ctx = min(n_ctx or trained, kv_pool_tokens) if kv_pool_tokens else n_ctx or trained
        source = chat_template or metadata.get("tokenizer.chat_template")
        if not source:
            architecture = metadata.get("general.architecture", "")
            source = default_template(architecture, self._single_token, model).source
        vocab = self._vocab._model.vocab
        self._vocab_handle = vocab
        self._bos = llama_cpp.llama_vocab_bos(vocab)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.template = ChatTemplate(
            source,
            bos_token=self._token_text(self._bos),
            eos_token=self._token_text(llama_cpp.llama_vocab_eos(vocab)),
            add_bos=self._add_bos,
        )
        #: The template renders a `tools` list itself (else our system prompt offers the tools).
        self.supports_tools = self.template.caps.supports_tools
        #: The template renders calls and their results itself (else our convention writes them as text).
        self.structured = self.template.caps.supports_tool_calls
        # The family its output is read in, from the template's call markers (else its special tokens).
        syntax = detect_syntax(
            source, self._single_token, tool_format=tool_format, reasoning_format=reasoning_format, model=model
        )
        self.dialect = syntax.dialect.name
        self.reasoning_tags = (
            parse_reasoning_tags(reasoning_tags, source) if reasoning_tags is not None else syntax.reasoning
        )
        tokens = range(llama_cpp.llama_vocab_n_tokens(vocab))
        self._attrs = [llama_cpp.llama_vocab_get_attr(vocab, token) for token in tokens]
        self.control_texts = ControlTexts(
            self._token_text(token) for token, attrs in enumerate(self._attrs) if attrs & _CONTROL
        )
        self._vocabulary = Vocabulary(
            tokenize=self.tokenize,
            is_control=lambda token: bool(self._attrs[token] & _CONTROL),
            text_of=self._token_text,
            strips=lambda token: (
                bool(self._attrs[token] & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                bool(self._attrs[token] & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP),
            ),
        )
        self.generation_prompt_tokens = self._generation_prompt()

    @classmethod
    def for_model(cls, spec: ModelSpec) -> ChatTokenizer:
        return cls(
            spec.path,
            n_ctx=spec.n_ctx,
            reasoning_tags=spec.reasoning_tags,
            chat_template=spec.chat_template,
            kv_pool_tokens=spec.kv_pool_tokens,
            tool_format=spec.tool_format,
            reasoning_format=spec.reasoning_format,
            model=spec.id,
        )

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        buffer = ctypes.create_string_buffer(256)
        size = llama_cpp.llama_token_to_piece(self._vocab_handle, token, buffer, len(buffer), 0, True)
        if size < 0:  # longer than the buffer: -size bytes
            buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self._vocab_handle, token, buffer, len(buffer), 0, True)
        return buffer.raw[: max(size, 0)].decode("utf-8", errors="replace")

    def tokenize(self, text: str, special: bool) -> list[int]:
        """`text`'s tokens: with `special`, control tokens' texts read as control tokens."""
        return self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def render_text(
        self,
        messages: Sequence[ChatMessage],
        template_options: Mapping[str, Any] | None = None,
        *,
        opening: bool = True,
    ) -> tuple[str, bool]:
        """The prompt as text, and whether control tokens' texts in the messages or tools became sentinels.
        `template_options`: the `tools` list it renders, and its own variables. `opening`: the template's opening
        of the assistant's turn at the end (add_generation_prompt)."""
        options = dict(template_options or {})
        messages_shielded, in_messages = self.control_texts.shield([message.as_template_dict() for message in messages])
        tools, in_tools = self.control_texts.shield(options.pop("tools", None) or [])
        text = self.template.render(messages_shielded, tools=tools, variables=options, add_generation_prompt=opening)
        return text, in_messages or in_tools

    def _single_token(self, text: str) -> bool:
        """Whether `text` is one special token of this vocabulary."""
        return len(self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)) == 1 and len(text) > 1

    def opens_reasoning(self, prompt: Sequence[int], opening: str) -> bool:
        """Whether the prompt's last tokens end in `opening` (whitespace after it aside)."""
        tail = self._vocab.detokenize(list(prompt[-16:]), special=True).decode("utf-8", errors="replace")
        return tail.rstrip().endswith(opening)

    def render(self, messages: Sequence[ChatMessage], template_options: Mapping[str, Any] | None = None) -> list[int]:
        """TemplateRenderError when the template refuses the conversation."""
        return self._tokens(*self.render_text(messages, template_options))

    def _generation_prompt(self) -> tuple[int, ...]:
        """The tokens a render ends with after the last message: the template's opening of the assistant's turn,
        read off a one-message conversation rendered with and without it (empty when the one does not begin with
        the other). NOTE: read without template options; a template whose opening depends on them (a reasoning
        switch) may end a prompt otherwise, and the callers check that a prompt ends with these tokens."""
        messages = [ChatMessage("user", "\u241eU\u241e")]
        opened = self._tokens(*self.render_text(messages))
        closed = self._tokens(*self.render_text(messages, opening=False))
        return tuple(opened[len(closed) :]) if opened[: len(closed)] == closed else ()

    def _tokens(self, prompt: str, shielded: bool) -> list[int]:
        if shielded:
            tokens = tokenize_shielded(prompt, self._vocabulary, self.control_texts)
        else:
            tokens = self.tokenize(prompt, special=True)
        if self._add_bos and self._bos >= 0 and (not tokens or tokens[0] != self._bos):
            tokens.insert(0, self._bos)
        return tokens

    def fits(self, prompt_tokens: int) -> bool:
        return prompt_tokens + MIN_OUTPUT_TOKENS <= self.n_ctx

    def grammar_builds(self, grammar: str) -> bool:
        """Built and freed at once: the generation builds its own. Only for grammars within the bounds of
        app.generation.grammars, which keep llama.cpp's recursive parser from overflowing the stack."""
        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab._model.vocab, grammar.encode(), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    def count(self, text: str) -> int:
        """Tokens of `text` alone, outside any template (as text: no control token read in it)."""
        return len(self.tokenize(text, special=False))

    def _window_start(self, conversation: Sequence[ChatMessage], start: int | None, before: int | None) -> int | None:
        """Where a truncated conversation may start, from `start` on and before `before`: anywhere in our
        convention's text turns; at a user turn for a template that renders calls (a window that opened on a tool
        result or an answer to it would hold a result without its call, which templates refuse)."""
        if start is None or not self.structured:
            return start
        end = len(conversation) if before is None else before
        return next((index for index in range(start, end) if conversation[index].role == "user"), None)

    def render_within_context(
        self,
        system: ChatMessage | None,
        conversation: Sequence[ChatMessage],
        *,
        truncate: bool,
        template_options: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Tokens of the whole conversation; with `truncate`, the oldest messages go first until it fits.

        Raises ContextTooLong when it cannot fit (even the newest message alone, when truncating).
        """
        head = [system] if system else []
        if not truncate:
            tokens = self.render([*head, *conversation], template_options)
            if not self.fits(len(tokens)):
                raise ContextTooLong(len(tokens), self.n_ctx)
            return tokens
        # NOTE: the newest messages are counted (each one's own tokens) only as far back as the window reaches, so
        # a 10,000-message history is neither counted nor rendered whole: rendering and tokenizing all of it took
        # minutes of CPU (issue 27). Then the oldest message to keep is searched for between one known not to fit
        # and one known to fit, each render's size giving the next guess (the counted tokens scaled by what that
        # render made of them, template included), bisecting when a guess falls outside; a few renders of a
        # window's worth each. Rendering again for every dropped message cost ~40 s of CPU for 100 x 10 KB
        # (bench/prompt_work.py).
        budget = self.n_ctx - MIN_OUTPUT_TOKENS
        head_size = self.count(system.text) if system else 0
        sizes: list[int] = []  # newest first
        while len(sizes) < len(conversation) and head_size + sum(sizes) <= budget:
            sizes.append(self.count(conversation[len(conversation) - 1 - len(sizes)].text))
        # Counted tokens of the messages from each start on (only where counted).
        suffix = {len(conversation) - 1 - index: total for index, total in enumerate(itertools.accumulate(sizes))}
        last = len(conversation) - 1
        # Rendering from `too_long` on does not fit (-1: nothing known), from `fitting` on it does (None: unknown).
        too_long = last - len(sizes) if head_size + sum(sizes) > budget else -1
        fitting: int | None = None
        best: list[int] = []
        start: int | None = too_long + 1
        while True:
            start = self._window_start(conversation, start, fitting)
            if start is None:  # no window starts between here and the one known to fit
                if fitting is None:
                    raise ContextTooLong(head_size + sum(sizes), self.n_ctx)  # at least: what was counted
                return best
            tokens = self.render([*head, *conversation[start:]], template_options)
            if self.fits(len(tokens)):
                fitting, best = start, tokens
            else:
                too_long = start
            upper = last if fitting is None else fitting - 1
            if upper <= too_long:
                if fitting is None:
                    raise ContextTooLong(len(tokens), self.n_ctx)
                return best
            # Tokens a counted token makes in this render, template included: the oldest start whose estimate fits.
            scale = (len(tokens) - head_size) / max(suffix[start], 1)
            guess = min((index for index in suffix if head_size + suffix[index] * scale <= budget), default=last)
            if fitting is not None and guess >= fitting:
                guess = fitting - 1  # the estimate says no more fit: check the one before
            start = guess if too_long < guess <= upper else (too_long + upper + 1) // 2
