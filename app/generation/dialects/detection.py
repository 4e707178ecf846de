"""Which family's syntax a model writes: read at load from its chat template (the markers it renders calls with),
else from the vocabulary's special tokens, unless the models file names it (`tool_format`, `reasoning_format`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from app.generation.dialects.families import BY_NAME, CONVENTION, DIALECTS, THINK, Dialect

logger = logging.getLogger(__name__)

#: reasoning_format values besides a dialect's name: the family's own markers, or no reasoning section.
REASONING_FORMATS = ("auto", "none", "think")


class UnknownFormat(ValueError):
    """A models file names a tool_format or reasoning_format this server does not read."""


@dataclass(frozen=True, slots=True)
class ModelSyntax:
    """What a model's output is read as: the dialect, its reasoning markers (None: no reasoning section), and
    whether a family was recognised (False: our convention, for a template none matches)."""

    dialect: Dialect
    reasoning: tuple[str, str] | None
    recognised: bool


def check_formats(tool_format: str | None, reasoning_format: str | None) -> None:
    """UnknownFormat for a tool_format or reasoning_format this server does not read (checked at load)."""
    if tool_format is not None and tool_format not in BY_NAME:
        raise UnknownFormat(f"tool_format {tool_format!r} is none of: {', '.join(sorted(BY_NAME))}")
    if reasoning_format is not None and reasoning_format not in (*REASONING_FORMATS, *BY_NAME):
        raise UnknownFormat(
            f"reasoning_format {reasoning_format!r} is none of: {', '.join([*REASONING_FORMATS, *sorted(BY_NAME)])}"
        )


def _from_template(template: str) -> Dialect | None:
    for dialect in DIALECTS:
        if any(all(sign in template for sign in group) for group in dialect.signs):
            return dialect
    return None


def _from_vocabulary(single_token: Callable[[str], bool]) -> Dialect | None:
    """The first family whose first two markup tokens are each one token of this vocabulary."""
    for dialect in DIALECTS:
        markers = dialect.markup_tokens[:2]
        if markers and all(single_token(marker) for marker in markers):
            return dialect
    return None


def detect_syntax(
    template: str,
    single_token: Callable[[str], bool],
    *,
    tool_format: str | None = None,
    reasoning_format: str | None = None,
    model: str = "",
) -> ModelSyntax:
    """The syntax of a model with this template and vocabulary (`single_token(text)`: whether `text` is one of its
    special tokens); `tool_format` / `reasoning_format` override what is detected. A template no family matches
    keeps our convention, and says so in the log."""
    check_formats(tool_format, reasoning_format)
    found = BY_NAME[tool_format] if tool_format else _from_template(template) or _from_vocabulary(single_token)
    dialect = found or CONVENTION
    if found is None:
        logger.info(
            "model %s: no model family's call syntax in its chat template; its calls are read in our convention (%s)",
            model,
            CONVENTION.name,
        )
    else:
        logger.info("model %s: its output is read as %s (%s)", model, dialect.name, dialect.label)
    return ModelSyntax(dialect, _reasoning(dialect, template, reasoning_format), found is not None)


def _reasoning(dialect: Dialect, template: str, setting: str | None) -> tuple[str, str] | None:
    if setting is None or setting == "auto":
        if dialect.reasoning is not None and (dialect is not CONVENTION or dialect.reasoning[0] in template):
            return dialect.reasoning
        return THINK if THINK[0] in template else None
    if setting == "none":
        return None
    if setting == "think":
        return THINK
    return BY_NAME[setting].reasoning
