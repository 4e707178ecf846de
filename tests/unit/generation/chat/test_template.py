"""A chat template rendered as llama-server renders it, on small templates written here: what llama.cpp adapts
(a system turn merged where the template has none, arguments as objects where it reads them so), our named
choices (short call ids, turns of one role joined), llama.cpp's engine's leniencies, and clear errors."""

from __future__ import annotations

import pytest

from app.generation.chat.template import (
    ChatTemplate,
    TemplateLoadError,
    TemplateRenderError,
    reasoning_variables,
    short_call_id,
)

#: Renders tools, calls (their arguments' members) and results; no system role (it never reads one).
CALLS = (
    "{% for tool in tools %}[tool {{ tool.function.name }}]{% endfor %}"
    "{% for message in messages %}"
    "{% if message.role == 'assistant' and message.tool_calls %}"
    "{% for call in message.tool_calls %}<call {{ call.id }} {{ call.function.name }} "
    "{{ call.function.arguments | tojson }}>{% endfor %}"
    "{% elif message.role == 'tool' %}<result {{ message.tool_call_id }}: {{ message.content }}>"
    "{% elif message.role != 'system' %}<{{ message.role }}: {{ message.content }}>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<assistant:{% endif %}"
)
CALL = [
    {"role": "user", "content": "Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}, "id": "call_abc"}
        ],
    },
    {"role": "tool", "content": "18 C", "tool_call_id": "call_abc", "name": "weather"},
]


def test_calls_render_with_object_arguments_and_a_system_turn_is_merged() -> None:
    template = ChatTemplate(CALLS)
    assert template.caps.supports_tool_calls and template.caps.supports_object_arguments
    assert not template.caps.supports_system_role
    tools = [{"type": "function", "function": {"name": "weather", "description": "", "parameters": {}}}]
    rendered = template.render([{"role": "system", "content": "Be brief."}, *CALL], tools=tools)
    assert rendered == (
        '[tool weather]<user: Be brief.\nParis?><call call_abc weather {"city": "Paris"}><result call_abc: 18 C>'
        "<assistant:"
    )


def test_a_template_that_demands_short_call_ids_gets_them() -> None:
    strict = CALLS.replace(
        "{% for call in message.tool_calls %}",
        "{% for call in message.tool_calls %}{% if call.id|length != 9 %}{{ raise_exception('ids of 9') }}{% endif %}",
    )
    template = ChatTemplate(strict)
    assert template.short_call_ids
    short = short_call_id("call_abc")
    assert len(short) == 9 and short.isalnum() and short == short_call_id("call_abc")
    assert f'<call {short} weather {{"city": "Paris"}}><result {short}: 18 C>' in template.render(CALL)


def test_turns_of_one_role_are_joined_where_the_template_demands_alternation() -> None:
    alternating = (
        "{% for message in messages %}{% if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}[{{ message.content }}]{% endfor %}"
    )
    template = ChatTemplate(alternating)
    assert template.alternating
    rendered = template.render([{"role": "user", "content": "A"}, {"role": "user", "content": "B"}])
    assert rendered == "[A\n\nB]"
    with pytest.raises(TemplateRenderError, match="roles must alternate"):
        template.render([{"role": "assistant", "content": "A"}])


def test_the_engine_is_lenient_as_llama_cpp_s_and_json_is_not_html_escaped() -> None:
    source = (
        "{{ 'Tools: ' + functions }}{{ missing.deeper }}{{ messages[0] | tojson }}"
        "{{ 'A'|safe + messages[0].content }}{{ tools | map(attribute='name') | tojson }}"
    )
    rendered = ChatTemplate(source).render([{"role": "user", "content": "<b>&'x'</b>"}])
    assert rendered == 'Tools: {"role": "user", "content": "<b>&\'x\'</b>"}A<b>&\'x\'</b>[]'


def test_a_template_that_loops_over_tools_renders_without_them() -> None:
    """Hermes 3's template loops over `tools` whatever it is: an absent list is none (llama.cpp leaves it
    undefined; llama-cpp-python's formatter passed None, and every request failed)."""
    source = "{% for tool in tools %}{{ tool }}{% endfor %}{{ messages[0].content }}"
    assert ChatTemplate(source).render([{"role": "user", "content": "hi"}]) == "hi"


def test_templates_that_cannot_be_used_fail_at_load() -> None:
    with pytest.raises(TemplateLoadError, match="does not compile"):
        ChatTemplate("{% for message in messages %}")
    with pytest.raises(TemplateLoadError, match="cannot render one user message: no users"):
        ChatTemplate("{{ raise_exception('no users') }}")


def test_reasoning_effort_sets_each_switch_templates_read() -> None:
    assert reasoning_variables(None) == {}
    assert reasoning_variables("none") == {"enable_thinking": False, "thinking": False}
    assert reasoning_variables("low") == {
        "enable_thinking": True,
        "thinking": True,
        "reasoning_effort": "low",
        "reasoning_strength": "low",
    }
    source = "{{ reasoning_effort | default('medium') }} {{ enable_thinking }}"
    template = ChatTemplate(source)
    assert template.caps.supports_reasoning_effort and "enable_thinking" in template.caps.variables
    assert template.render([{"role": "user", "content": "x"}]) == "medium True"
    assert template.render([{"role": "user", "content": "x"}], variables=reasoning_variables("high")) == "high True"
