"""MkDocs hook: the settings reference page's table, generated from `app.config.Settings` at build time.

`docs/reference/settings.md` holds the marker line `<!-- settings-table -->`; this hook replaces it with one row
per field of `Settings.model_fields` (its environment variable, its default and its `description`), so the page
cannot drift from the code. Registered under `hooks:` in mkdocs.yml.
"""

from __future__ import annotations

import html
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from mkdocs.exceptions import PluginError

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page
    from pydantic.fields import FieldInfo

#: The page the table goes on (relative to docs_dir) and the line it replaces there.
SETTINGS_PAGE = "reference/settings.md"
MARKER = "<!-- settings-table -->"
ENV_PREFIX = "RESPONSES_"
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _settings_fields() -> dict[str, FieldInfo]:
    """`Settings.model_fields`, importing `app` from the repository root when it is not installed."""
    if str(REPOSITORY_ROOT) not in sys.path:
        sys.path.insert(0, str(REPOSITORY_ROOT))
    from app.config import Settings

    return dict(Settings.model_fields)


def _code(text: str) -> str:
    """`text` as a Markdown code span (a longer fence when it holds backticks; the tables extension keeps a `|`
    inside a code span in its cell)."""
    fence = "`` " if "`" in text else "`"
    return f"{fence}{text}{fence[::-1]}"


def _value(value: object) -> str:
    """A default as an environment variable would spell it: `true`, `1024`, `15` (not `15.0`), `a,b`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else str(value)
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(_value(item) for item in value)
    return str(value)


def _default(name: str, field: FieldInfo) -> str:
    """The field's default, readably: `unset` for None (or an empty collection), else the value in backticks (a
    size in bytes with its MiB or KiB too)."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None or (isinstance(value, list | tuple | set | frozenset | dict | str) and not value):
        return "unset"
    shown = _code(_value(value))
    if name.endswith("_bytes") and isinstance(value, int) and value and not value % 1024:
        size, unit = (value // MIB, "MiB") if not value % MIB else (value // 1024, "KiB")
        shown += f" ({size} {unit})"
    return shown


def _prose(text: str) -> str:
    """A description as one table cell: its `code spans` kept, the rest escaped (HTML such as `<think>`,
    Markdown emphasis characters, the cell separator `|`)."""
    parts = " ".join(text.split()).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans at all
        parts = [" ".join(parts).replace("`", "'")]
    cell: list[str] = []
    for index, part in enumerate(parts):
        if index % 2:
            cell.append(_code(part))
        else:
            escaped = html.escape(part, quote=False)
            for character in "\\*_[]":
                escaped = escaped.replace(character, "\\" + character)
            cell.append(escaped.replace("|", "&#124;"))
    return "".join(cell)


def settings_table() -> str:
    """The Markdown table: one row per setting, in the order `Settings` declares them."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in _settings_fields().items():
        variable = f"{ENV_PREFIX}{name.upper()}"
        description = _prose(field.description) if field.description else ""
        rows.append(f"| `{variable}` | {_default(name, field)} | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str | None:
    """Replace the marker line of the settings page with the generated table."""
    if page.file.src_uri != SETTINGS_PAGE:
        return None
    lines = markdown.splitlines()
    if MARKER not in (line.strip() for line in lines):
        raise PluginError(f"{SETTINGS_PAGE} has no line {MARKER!r} for the settings table")
    table = settings_table()
    return "\n".join(table if line.strip() == MARKER else line for line in lines) + "\n"
