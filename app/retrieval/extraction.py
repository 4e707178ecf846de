"""A file's text, by its kind: plain text, Markdown, JSON and code as UTF-8, HTML through BeautifulSoup, PDF
through pypdf. A file that cannot be read is an ExtractionError with the reason its vector store file shows."""

from __future__ import annotations

import io
import json
import logging
from pathlib import PurePath
from typing import Literal

logger = logging.getLogger(__name__)

#: Names whose content is read as UTF-8 text as it is (prose, markup, data and source code).
_TEXT_SUFFIXES = (
    ".txt .text .md .markdown .mdx .rst .adoc .org .tex .csv .tsv .log .ini .cfg .conf .toml .yaml .yml .xml "
    ".py .pyi .js .mjs .cjs .ts .tsx .jsx .java .kt .kts .scala .go .rs .c .h .cc .cpp .cxx .hpp .hh .cs .rb "
    ".php .pl .pm .swift .m .mm .r .lua .sh .bash .zsh .fish .ps1 .bat .sql .css .scss .less .vue .svelte "
    ".dart .ex .exs .erl .hs .ml .clj .el .vim .proto .graphql .gradle .cmake .mk .dockerfile .ipynb"
)
TEXT_SUFFIXES = frozenset(_TEXT_SUFFIXES.split())
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
#: The most pages of a PDF read (a pathological file is cut there rather than read for ever).
MAX_PDF_PAGES = 5000

ErrorCode = Literal["unsupported_file", "invalid_file"]


class ExtractionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


def _utf8(data: bytes, what: str) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ExtractionError(
            "unsupported_file", f"The file is not UTF-8 {what} (undecodable byte at offset {error.start})."
        ) from None
    if "\x00" in text:
        raise ExtractionError("unsupported_file", f"The file holds NUL characters: it is not {what}.")
    return text


def _json(data: bytes) -> str:
    text = _utf8(data, "JSON")
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        raise ExtractionError(
            "invalid_file", f"The file is not valid JSON: {error.msg} at line {error.lineno}."
        ) from None
    return text


def _html(data: bytes) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_utf8(data, "HTML"), "html.parser")
    for hidden in soup(["script", "style", "noscript", "template"]):
        hidden.decompose()
    return soup.get_text("\n")


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ExtractionError("invalid_file", "The PDF is encrypted: its text cannot be read.")
        pages = [page.extract_text() or "" for page in reader.pages[:MAX_PDF_PAGES]]
    except ExtractionError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ExtractionError("invalid_file", f"The PDF could not be read: {error}") from None
    return "\n\n".join(pages)


def _kind(filename: str, data: bytes) -> str:
    suffix = PurePath(filename.lower()).suffix
    head = data[:1024].lstrip().lower()
    if suffix == ".pdf" or data.startswith(b"%PDF-"):
        return "pdf"
    if suffix in HTML_SUFFIXES or head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if suffix == ".json" or suffix == ".jsonl":
        return "json" if suffix == ".json" else "text"
    return "text"


def extract_text(filename: str, data: bytes) -> str:
    """The text of a file named `filename` holding `data`, whitespace kept; an ExtractionError if it has none."""
    kind = _kind(filename, data)
    if kind == "pdf":
        text = _pdf(data)
    elif kind == "html":
        text = _html(data)
    elif kind == "json":
        text = _json(data)
    else:
        suffix = PurePath(filename.lower()).suffix
        # Unknown suffixes too, as long as they are UTF-8 text: code and notes come with every name.
        text = _utf8(
            data, "text" if suffix in TEXT_SUFFIXES or not suffix else f"text ({suffix} files are read as text)"
        )
    if not text.strip():
        raise ExtractionError("invalid_file", "No text could be extracted from the file.")
    return text
