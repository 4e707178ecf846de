"""The model families this server reads in their own syntax: for each, how its output is parsed, the grammar that
forces one call in its syntax, its reasoning markers, the tokens that end its turn and the control tokens its
syntax is written in (rendered as text, not dropped, so that the parser sees them). Facts taken from the
families' chat templates and llama.cpp's chat parsers and their tests."""

# ruff: noqa: RUF001 (DeepSeek's control tokens are spelt with fullwidth vertical bars)
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.generation.dialects import gemma4
from app.generation.dialects.call_grammars import XmlShape, gemma_call_grammar, json_call_grammar, xml_call_grammar
from app.generation.dialects.harmony import HarmonyParser
from app.generation.dialects.readers import (
    CallReader,
    ListCallReader,
    NameThenJson,
    ObjectCallReader,
    ObjectKeys,
    ReadState,
)
from app.generation.dialects.segments import OutputParser, ParseOptions, Segment
from app.generation.dialects.tagged import PlainParser, TaggedParser, TaggedSyntax
from app.generation.dialects.xml_params import XmlParameters
from app.generation.grammars import tool_call_grammar
from app.generation.tool_calls import FunctionSpec

THINK = ("<think>", "</think>")

Grammar = Callable[[Sequence[FunctionSpec]], str]


@dataclass(frozen=True, slots=True)
class Dialect:
    """One family's output syntax (see the module's doc). `tagged`: the shared parser's syntax (None: its own)."""

    name: str
    #: The families that write it, for the docs and the load log.
    label: str
    tagged: TaggedSyntax | None
    grammar: Grammar
    reasoning: tuple[str, str] | None = None
    #: Tokens that end the model's turn beside the vocabulary's end-of-generation ones.
    end_tokens: tuple[str, ...] = ()
    #: Control tokens the syntax is written in: rendered as their text.
    markup_tokens: tuple[str, ...] = ()
    #: The template variable `reasoning.effort` reaches, and how (the docs' table).
    effort: str = ""
    parallel: bool = True
    #: What in a template says this family writes it: any of these groups, each whole.
    signs: tuple[tuple[str, ...], ...] = field(default=())

    def parser(self, options: ParseOptions, reasoning: tuple[str, str] | None) -> OutputParser:
        """A parser for one output; `reasoning`: the markers in use (the family's, or the models file's)."""
        if self.tagged is None:
            return HarmonyParser(options)
        if not options.tools and (reasoning is None or not options.reasoning):
            return PlainParser()
        return TaggedParser(self.tagged, options, reasoning)


PLAIN_KEYS = ObjectKeys()


def _object_reader(keys: ObjectKeys = PLAIN_KEYS) -> Callable[[int, ParseOptions], ObjectCallReader]:
    return lambda start, options: ObjectCallReader(start, options, keys)


def _list_reader(keys: ObjectKeys = PLAIN_KEYS) -> Callable[[int, ParseOptions], ListCallReader]:
    return lambda start, options: ListCallReader(start, options, keys)


def _literal(text: str) -> Callable[[FunctionSpec], tuple[str, str]]:
    """A wrapping whose text before the arguments names the function in place of `{name}`."""
    before, after = text.split("{arguments}")
    return lambda function: (before.replace("{name}", function.name), after)


def _json(text: str) -> Grammar:
    wrap = _literal(text)
    return lambda functions: json_call_grammar(functions, wrap)


def _xml(text: str, shape: XmlShape) -> Grammar:
    wrap = _literal(text)
    return lambda functions: xml_call_grammar(functions, wrap, shape)


HERMES = Dialect(
    "hermes",
    "Hermes 2/3, Qwen 2.5/3 (JSON calls), QwQ, Granite 4.x, SmolLM3, Phi-3.5, and every template none matches",
    TaggedSyntax(("<tool_call>",), _object_reader(), call_close="</tool_call>"),
    tool_call_grammar,
    THINK,
    end_tokens=("<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|end|>"),
    effort="`enable_thinking` (Qwen3, SmolLM3), `thinking` (Granite)",
    signs=(("<tool_call>",),),
)

QWEN_XML = Dialect(
    "qwen3_coder",
    "Qwen3-Coder, Qwen3.5 (XML calls)",
    TaggedSyntax(
        ("<tool_call>",),
        XmlParameters(
            name_open="<function=",
            name_close=(">",),
            key_open="<parameter=",
            key_close=">",
            value_close="</parameter>",
            close="</function>",
        ).reader,
        call_close="</tool_call>",
        inner_markers=("<function=",),
    ),
    _xml(
        "<tool_call>\n<function={name}>\n{arguments}</function>\n</tool_call>",
        XmlShape("<parameter=", ">\n", "\n</parameter>\n"),
    ),
    THINK,
    end_tokens=("<|im_end|>", "<|endoftext|>"),
    effort="`enable_thinking`",
    signs=(("<function=", "<parameter="),),
)

HARMONY = Dialect(
    "harmony",
    "gpt-oss (harmony)",
    None,
    _json(" to=functions.{name}<|channel|>commentary json<|message|>{arguments}"),
    None,
    end_tokens=("<|return|>", "<|call|>"),
    markup_tokens=("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"),
    effort="`reasoning_effort` (low, medium, high)",
    signs=(("<|channel|>", "<|message|>"),),
)

LLAMA3 = Dialect(
    "llama3",
    "Llama 3.1, 3.2, 3.3 (JSON calls, `<|python_tag|>`)",
    TaggedSyntax(
        ("<|python_tag|>",), _object_reader(ObjectKeys(arguments=("parameters", "arguments"))), bare_json=True
    ),
    _json('{"name": "{name}", "parameters": {arguments}}'),
    None,
    end_tokens=("<|eot_id|>", "<|eom_id|>"),
    markup_tokens=("<|python_tag|>",),
    effort="none (no reasoning)",
    parallel=False,
    signs=(('"parameters": dictionary of argument name',),),
)

_MISTRAL_NAME = re.compile(r"\[CALL_ID\].*$", re.DOTALL)


class _MistralReader:
    """`[TOOL_CALLS]` then a JSON list (Nemo), else `name[ARGS]{…}` (newer; `[CALL_ID]id` before `[ARGS]` too)."""

    def __init__(self, start: int, options: ParseOptions) -> None:
        self._start, self._options = start, options
        self._inner: CallReader | None = None
        self.end, self.opened = start, False

    def read(self, text: str) -> tuple[list[Segment], ReadState]:
        if self._inner is None:
            rest = text[self._start :].lstrip()
            if not rest:
                return [], "more"
            self._inner = (
                ListCallReader(self._start, self._options)
                if rest.startswith("[")
                else NameThenJson("[ARGS]", strip=_MISTRAL_NAME).reader(self._start, self._options)
            )
        segments, state = self._inner.read(text)
        self.end, self.opened = self._inner.end, self._inner.opened
        return segments, state

    def cut(self, text: str) -> list[Segment]:
        return self._inner.cut(text) if self._inner is not None else []


MISTRAL = Dialect(
    "mistral",
    "Mistral Small 3.2, Devstral, Magistral, Ministral 3 (`[TOOL_CALLS]name[ARGS]{…}`, `[THINK]`)",
    TaggedSyntax(
        ("[TOOL_CALLS]",),
        _MistralReader,
    ),
    _json("[TOOL_CALLS]{name}[ARGS]{arguments}"),
    ("[THINK]", "[/THINK]"),
    end_tokens=("</s>",),
    markup_tokens=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"),
    effort="none: Magistral and Ministral 3 Reasoning always reason",
    signs=(("[ARGS]", "[TOOL_CALLS]"),),
)

MISTRAL_JSON = Dialect(
    "mistral_json",
    "Mistral Nemo, Mistral 7B v0.3 (`[TOOL_CALLS][{…}]`)",
    TaggedSyntax(("[TOOL_CALLS]",), _MistralReader),
    _json('[TOOL_CALLS][{"name": "{name}", "arguments": {arguments}}]'),
    None,
    end_tokens=("</s>",),
    markup_tokens=("[TOOL_CALLS]",),
    effort="none (no reasoning)",
    signs=(("[TOOL_CALLS]",),),
)


DEEPSEEK_R1 = Dialect(
    "deepseek_r1",
    "DeepSeek R1 and its distills (`<｜tool▁call▁begin｜>function<｜tool▁sep｜>name` then fenced JSON)",
    TaggedSyntax(
        ("<｜tool▁call▁begin｜>",),
        NameThenJson("```json", prefix="function<｜tool▁sep｜>", suffix="```").reader,
        call_close="<｜tool▁call▁end｜>",
        section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    ),
    _json(
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{arguments}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    ),
    THINK,
    end_tokens=("<｜end▁of▁sentence｜>",),
    markup_tokens=(
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
    ),
    effort="`enable_thinking` (the distills' templates: the prompt opens `<think>`)",
    signs=(("function<｜tool▁sep｜>",), ("tool['type'] + '<｜tool▁sep｜>'",)),
)

DEEPSEEK_V3 = Dialect(
    "deepseek_v3",
    "DeepSeek V3, V3.1 (`<｜tool▁call▁begin｜>name<｜tool▁sep｜>{…}`)",
    TaggedSyntax(
        ("<｜tool▁call▁begin｜>",),
        NameThenJson("<｜tool▁sep｜>", prefix="function").reader,
        call_close="<｜tool▁call▁end｜>",
        section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    ),
    _json(
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    ),
    THINK,
    end_tokens=("<｜end▁of▁sentence｜>",),
    markup_tokens=DEEPSEEK_R1.markup_tokens,
    effort="`thinking`",
    signs=(("<｜tool▁calls▁begin｜>",),),
)

_DSML = "<｜DSML｜"
_DSML_PARAMETERS = XmlParameters(
    name_close=('">',),
    key_open=f'{_DSML}parameter name="',
    key_close='"',
    attributes_end=">",
    value_close=f"</{_DSML[1:]}parameter>",
    close=f"</{_DSML[1:]}invoke>",
)
_DSML_SHAPE = XmlShape(
    f'{_DSML}parameter name="', '"', f"</{_DSML[1:]}parameter>\n", ' string="true">', ' string="false">'
)


def _dsml(section: str, label: str, name: str, sign: str) -> Dialect:
    opening, closing = f"{_DSML}{section}>", f"</{_DSML[1:]}{section}>"
    return Dialect(
        name,
        label,
        TaggedSyntax((f'{_DSML}invoke name="',), _DSML_PARAMETERS.reader, section=(opening, closing)),
        _xml(f'{opening}\n{_DSML}invoke name="{{name}}">\n{{arguments}}</{_DSML[1:]}invoke>\n{closing}', _DSML_SHAPE),
        THINK,
        end_tokens=("<｜end▁of▁sentence｜>",),
        effort="`thinking`",
        signs=(("｜DSML｜", sign),),
    )


DEEPSEEK_V32 = _dsml("function_calls", "DeepSeek V3.2 (DSML `function_calls`)", "deepseek_v32", "function_calls>")
DEEPSEEK_V4 = _dsml("tool_calls", "DeepSeek V4 (DSML `tool_calls`)", "deepseek_v4", "tool_calls>")

GEMMA4 = Dialect(
    "gemma4",
    "Gemma 4 (`<|tool_call>call:name{…}<tool_call|>`)",
    # An empty thought channel, or its stray markers, inside the answer: dropped.
    TaggedSyntax(
        (gemma4.CALL_OPEN,), gemma4.GemmaCallReader, answer_markers=("<|channel>thought", "<channel|>", "<|channel>")
    ),
    lambda functions: gemma_call_grammar(
        functions, lambda function: (f"{gemma4.CALL_OPEN}call:{function.name}", gemma4.CALL_CLOSE)
    ),
    ("<|channel>thought", "<channel|>"),
    end_tokens=("<turn|>", "<|tool_response>"),
    markup_tokens=(gemma4.CALL_OPEN, gemma4.CALL_CLOSE, gemma4.QUOTE, "<|channel>", "<channel|>"),
    effort="`enable_thinking` (it writes its `think` control token)",
    signs=((gemma4.CALL_OPEN, gemma4.CALL_CLOSE),),
)

GLM = Dialect(
    "glm",
    "GLM-4.5, 4.6, 4.7 (`<tool_call>name<arg_key>…</arg_key><arg_value>…</arg_value>`)",
    TaggedSyntax(
        ("<tool_call>",),
        XmlParameters(
            name_close=("\n", "<arg_key>", "</tool_call>"),
            key_open="<arg_key>",
            key_close="</arg_key>",
            value_open="<arg_value>",
            value_close="</arg_value>",
            close="</tool_call>",
        ).reader,
    ),
    _xml(
        "<tool_call>{name}\n{arguments}</tool_call>", XmlShape("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n")
    ),
    THINK,
    end_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    effort="`enable_thinking`",
    signs=(("<arg_key>", "<arg_value>"),),
)

_KIMI_NAME = re.compile(r"^functions\.|:\d+$")

KIMI = Dialect(
    "kimi",
    "Kimi K2 (`<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}`)",
    TaggedSyntax(
        ("<|tool_call_begin|>",),
        NameThenJson("<|tool_call_argument_begin|>", strip=_KIMI_NAME).reader,
        call_close="<|tool_call_end|>",
        section=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
        calls_end_reasoning=True,
    ),
    _json(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>{arguments}"
        "<|tool_call_end|><|tool_calls_section_end|>"
    ),
    THINK,
    end_tokens=("<|im_end|>",),
    markup_tokens=(
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|tool_calls_section_end|>",
    ),
    effort="none (K2 Thinking always reasons)",
    signs=(("<|tool_calls_section_begin|>",),),
)

GRANITE = Dialect(
    "granite",
    "Granite 3.3 (`<|tool_call|>[{…}]`, `<think>` then `<response>`)",
    TaggedSyntax(("<|tool_call|>",), _list_reader(), answer_markers=("<response>", "</response>")),
    _json('<|tool_call|>[{"name": "{name}", "arguments": {arguments}}]'),
    THINK,
    end_tokens=("<|end_of_text|>",),
    markup_tokens=("<|tool_call|>",),
    effort="`thinking`",
    signs=(("<|tool_call|>",),),
)

MINIMAX = Dialect(
    "minimax",
    "MiniMax M2 (`<minimax:tool_call><invoke name=…><parameter name=…>`)",
    TaggedSyntax(
        ('<invoke name="',),
        XmlParameters(
            name_close=('">',),
            key_open='<parameter name="',
            key_close='">',
            value_close="</parameter>",
            close="</invoke>",
        ).reader,
        section=("<minimax:tool_call>", "</minimax:tool_call>"),
    ),
    _xml(
        '<minimax:tool_call>\n<invoke name="{name}">\n{arguments}</invoke>\n</minimax:tool_call>',
        XmlShape('<parameter name="', '">', "</parameter>\n"),
    ),
    THINK,
    end_tokens=("[e~[",),
    effort="none (M2 always reasons)",
    signs=(("<minimax:tool_call>",),),
)

COMMAND_R = Dialect(
    "command_r",
    "Command R7B (`<|START_ACTION|>[…]<|END_ACTION|>`, `<|START_THINKING|>`)",
    TaggedSyntax(
        ("<|START_ACTION|>",),
        _list_reader(ObjectKeys(name=("tool_name", "name"), arguments=("parameters", "arguments"))),
        call_close="<|END_ACTION|>",
        answer_markers=("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
    ),
    _json(
        '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "{name}", "parameters": {arguments}}\n]'
        "<|END_ACTION|>"
    ),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    end_tokens=("<|END_OF_TURN_TOKEN|>",),
    markup_tokens=(
        "<|START_ACTION|>",
        "<|END_ACTION|>",
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "<|START_THINKING|>",
        "<|END_THINKING|>",
    ),
    effort="`enable_thinking`",
    signs=(("<|START_ACTION|>",),),
)

FUNCTIONARY = Dialect(
    "functionary",
    "Functionary v3.1 (`<function=name>{…}</function>`)",
    TaggedSyntax(("<function=",), NameThenJson(">").reader, call_close="</function>"),
    _json("<function={name}>{arguments}</function>"),
    None,
    end_tokens=("<|eot_id|>", "<|eom_id|>"),
    effort="none (no reasoning)",
    parallel=False,
    signs=(("start with <function= and end with </function>",),),
)

#: Detection order: the most specific signs first (Qwen3-Coder's `<function=` before Functionary's, DSML before
#: DeepSeek's older tokens, Mistral's `[ARGS]` before its older list form, Hermes' `<tool_call>` last).
DIALECTS: tuple[Dialect, ...] = (
    HARMONY,
    DEEPSEEK_V32,
    DEEPSEEK_V4,
    DEEPSEEK_R1,
    DEEPSEEK_V3,
    KIMI,
    MINIMAX,
    GLM,
    GEMMA4,
    QWEN_XML,
    MISTRAL,
    MISTRAL_JSON,
    COMMAND_R,
    GRANITE,
    FUNCTIONARY,
    LLAMA3,
    HERMES,
)
BY_NAME = {dialect.name: dialect for dialect in DIALECTS}
#: Our convention: what a template no family matches is read in (and what a job queued before jobs named
#: their dialect was).
CONVENTION = HERMES


def dialect_named(name: str) -> Dialect:
    """The dialect of that name; our convention for a name this version does not know (a newer job's)."""
    return BY_NAME.get(name, CONVENTION)
