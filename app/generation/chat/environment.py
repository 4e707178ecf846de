"""The Jinja environment a chat template runs in, as llama.cpp's own engine gives it (common/jinja): blocks trimmed
and left-stripped, loop controls, HuggingFace's `generation` tag, `tojson` as Python's json.dumps writes it (no
HTML escaping), `raise_exception`, `strftime_now`; and the two fixes llama.cpp applies to template sources."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.runtime
from jinja2.sandbox import SandboxedEnvironment

#: What llama.cpp rewrites in a template's source before it compiles it (common_chat_templates_init): gpt-oss's
#: refusal of `<|channel|>` text in content, and Mistral's refusal of an assistant turn with neither content nor
#: calls. NOTE: a rewrite of the source, as theirs is, so that both render the same conversation the same way.
SOURCE_FIXES: tuple[tuple[str, str, str], ...] = (
    (
        "<|channel|>",
        '{%- if "<|channel|>analysis<|message|>" in message.content or '
        '"<|channel|>final<|message|>" in message.content %}',
        "{%- if false %}",
    ),
    (
        "[TOOL_CALLS]",
        "{%- if (message['content'] is none or message['content'] == '' or message['content']|length == 0) and "
        "(message['tool_calls'] is not defined or message['tool_calls'] is none or "
        "message['tool_calls']|length == 0) %}",
        "{%- if false %}",
    ),
)


class TemplateRaised(ValueError):
    """The template refused the conversation (its own `raise_exception`)."""


class GenerationTag(jinja2.ext.Extension):
    """HuggingFace's `{% generation %}...{% endgeneration %}` (training masks): its body renders as it is."""

    tags = {"generation"}  # noqa: RUF012 - Jinja's own attribute

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """llama.cpp's and transformers' `tojson`: json.dumps, not Jinja's HTML-safe one (which escapes `<`, `>`, `&`
    and `'`: a tool's schema would read differently from what the model was trained on)."""
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_listed,
    )


def _listed(value: Any) -> Any:
    """What json.dumps cannot write itself: a filter's sequence (`tools | map(...)`) as the list it stands for."""
    if isinstance(value, jinja2.Undefined):
        return None
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None


def raise_exception(message: str) -> NoReturn:
    raise TemplateRaised(message)


def strftime_now(format_string: str) -> str:
    """The local time, formatted (llama.cpp: std::strftime on localtime)."""
    return datetime.now().strftime(format_string)


class LenientUndefined(jinja2.ChainableUndefined):
    """A name or member that is not there, as llama.cpp's engine treats it: its members are not there either, and
    joined to a string with `+` it is the empty string (HuggingFace's Undefined raises in both)."""

    def __add__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__add__(other)

    def __radd__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__radd__(other)


def fixed_source(source: str) -> str:
    """The template as llama.cpp compiles it (SOURCE_FIXES)."""
    for marker, refusal, replacement in SOURCE_FIXES:
        if marker in source and refusal in source:
            source = source.replace(refusal, replacement)
    return source


class ChatEnvironment(SandboxedEnvironment):
    """A sandbox (templates come with model files) configured as llama.cpp's engine and transformers are.

    NOTE: not Jinja's immutable sandbox (transformers'): llama.cpp's engine lets a template append to and pop
    from its own lists (Kimi K2's template does); every render gets messages built for it alone."""

    #: `+` goes through call_binop: none or undefined joined to a string is the string, as llama.cpp has it.
    intercepted_binops = frozenset({"+"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            extensions=[GenerationTag, jinja2.ext.loopcontrols],
            undefined=LenientUndefined,
        )
        self.filters["tojson"] = tojson
        # NOTE: `safe` is Jinja's Markup, which escapes what is joined to it; llama.cpp's engine has no escaping.
        self.filters["safe"] = lambda value: value
        self.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and (isinstance(left, str) or isinstance(right, str)):
            if left is None or isinstance(left, jinja2.Undefined):
                return right
            if right is None or isinstance(right, jinja2.Undefined):
                return left
        return super().call_binop(context, operator, left, right)


def compile_template(source: str, environment: jinja2.Environment | None = None) -> jinja2.Template:
    """The template compiled (jinja2.TemplateSyntaxError when it is not a template)."""
    return (environment or ChatEnvironment()).from_string(fixed_source(source))
