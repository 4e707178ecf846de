"""Text from clients, tools, files and the web never becomes a control token: before a template renders it, every
control token's text in it (`<|im_end|>`, `<|start|>`, ...) becomes a private sentinel; the render is tokenized with
control tokens read in the template's markup only, and each sentinel as the text it stands for.

NOTE: the cost for ordinary text is one scan of its strings: with no control token's text in them, the prompt is
tokenized exactly as before (control tokens parsed in the whole render). A render with sentinels is tokenized as
llama.cpp tokenizes with special tokens parsed (split at the control tokens, each piece between them tokenized
alone); only the pieces that hold a sentinel are tokenized again, from their text, with no control token parsed.
A control token's text that a template builds by joining two client strings (one ending with `<|im_`, the next
starting with `end|>`, nothing between) is not caught: no shipped template joins two contents without markup."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: Private-use code points: a sentinel is OPEN, the index of the text it stands for, CLOSE.
OPEN = "\uf8f0"
CLOSE = "\uf8f1"
_SENTINEL = re.compile(f"{OPEN}(\\d+){CLOSE}")
#: A sentinel inside JSON a template wrote with ensure_ascii (`\\uf8f0` ...).
_ESCAPED_SENTINEL = re.compile(r"\\uf8f0(\d+)\\uf8f1")


def _trie_pattern(texts: Iterable[str]) -> str:
    """One regular expression for many literal strings, as a trie (an alternation of thousands of control
    tokens, as Gemma's vocabulary has, would be tried one by one at every character)."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for character in text:
            node = node.setdefault(character, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        ends = "" in node
        branches = [re.escape(character) + pattern(child) for character, child in node.items() if character]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if ends else body

    return pattern(trie)


class ControlTexts:
    """The texts of a vocabulary's control tokens (those llama.cpp reads only with special tokens parsed), and
    how client text that holds one is kept from becoming one."""

    def __init__(self, texts: Iterable[str]) -> None:
        # Longest first, as llama.cpp matches; the sentinel's own opening is escaped too (a client may send it).
        self.texts: tuple[str, ...] = tuple(sorted({text for text in texts if text} | {OPEN}, key=len, reverse=True))
        self._index = {text: index for index, text in enumerate(self.texts)}
        self._pattern = re.compile(_trie_pattern(self.texts))

    def shield(self, value: Any) -> tuple[Any, bool]:
        """`value` (strings, lists and mappings of them) with each control text replaced by its sentinel, and
        whether any was."""
        if isinstance(value, str):
            if self._pattern.search(value) is None:
                return value, False
            return self._pattern.sub(lambda match: f"{OPEN}{self._index[match.group(0)]}{CLOSE}", value), True
        if isinstance(value, dict):
            shielded: dict[str, Any] = {}
            found = False
            for key, element in value.items():
                shielded[key], hit = self.shield(element)
                found = found or hit
            return shielded, found
        if isinstance(value, list | tuple):
            elements = [self.shield(element) for element in value]
            return [element for element, _ in elements], any(hit for _, hit in elements)
        return value, False

    def restore(self, text: str) -> str:
        """Each sentinel as the text it stands for (in JSON written with ensure_ascii, as JSON escapes)."""
        text = _SENTINEL.sub(lambda match: self.texts[int(match.group(1))], text)
        return _ESCAPED_SENTINEL.sub(
            lambda match: self.texts[int(match.group(1))].encode("ascii", "backslashreplace").decode(), text
        )


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What splitting a tokenized render needs of the vocabulary."""

    #: Text -> tokens, with control tokens parsed (True) or not (False).
    tokenize: Callable[[str, bool], list[int]]
    is_control: Callable[[int], bool]
    #: A control token's text.
    text_of: Callable[[int], str]
    #: Whether llama.cpp strips the whitespace on a control token's left (LSTRIP) or right (RSTRIP).
    strips: Callable[[int], tuple[bool, bool]]


def tokenize_shielded(rendered: str, vocabulary: Vocabulary, texts: ControlTexts) -> list[int]:
    """A render that holds sentinels, tokenized: control tokens where its markup has them, the pieces between them
    as llama.cpp tokenizes them, and those that hold a sentinel again from their restored text, as plain text."""
    tokens = vocabulary.tokenize(rendered, True)
    result: list[int] = []
    piece: list[int] = []
    position = 0
    previous: int | None = None
    for token in tokens:
        if not vocabulary.is_control(token):
            piece.append(token)
            continue
        text = vocabulary.text_of(token)
        at = rendered.find(text, position)
        if at < 0:  # not where the markup has it (no control token text comes from elsewhere): keep it as read
            piece.append(token)
            continue
        result += _piece(rendered[position:at], piece, previous, token, vocabulary, texts)
        result.append(token)
        position, piece, previous = at + len(text), [], token
    result += _piece(rendered[position:], piece, previous, None, vocabulary, texts)
    return result


def _piece(
    text: str,
    tokens: Sequence[int],
    before: int | None,
    after: int | None,
    vocabulary: Vocabulary,
    texts: ControlTexts,
) -> list[int]:
    if OPEN not in text and "\\uf8f0" not in text:
        return list(tokens)
    if before is not None and vocabulary.strips(before)[1]:
        text = text.lstrip()
    if after is not None and vocabulary.strips(after)[0]:
        text = text.rstrip()
    return vocabulary.tokenize(texts.restore(text), False) if text else []
