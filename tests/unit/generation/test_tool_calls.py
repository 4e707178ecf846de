"""Reading calls back out of the model's text, whole and cut off at every point."""

from __future__ import annotations

import json

from app.generation.tool_calls import CALL_CLOSE, CALL_OPEN, ParsedCall, parse_calls, parse_cut_calls

KNOWN = {"get_weather": "function", "run_sql": "custom"}
ARGUMENTS = '{"city": "Par\\u00eds", "days": [1, 2]}'
CALL = f'{CALL_OPEN}{{"name": "get_weather", "arguments": {ARGUMENTS}}}{CALL_CLOSE}'
QUERY = 'SELECT "a\\b" FROM t\n'
CUSTOM_CALL = f"{CALL_OPEN}{json.dumps({'name': 'run_sql', 'input': QUERY})}{CALL_CLOSE}"


def test_a_function_call_cut_anywhere_is_read_as_far_as_it_got() -> None:
    name_read = CALL.index('"get_weather"') + len('"get_weather"')
    arguments_from = CALL.index(ARGUMENTS)
    arguments_read = arguments_from + len(ARGUMENTS)
    whole = ParsedCall("get_weather", json.dumps(json.loads(ARGUMENTS), ensure_ascii=False))
    for cut in range(len(CALL) + 1):
        calls = parse_cut_calls(CALL[:cut], KNOWN)
        if cut < name_read:
            assert calls == [], cut
        elif cut < arguments_read:
            so_far = CALL[arguments_from:cut] if cut > arguments_from else ""
            assert calls == [ParsedCall("get_weather", so_far, complete=False)], cut
        else:  # the arguments are whole: only the call's closing brace or tag was cut
            assert calls == [whole], cut


def test_a_custom_call_cut_anywhere_has_its_input_so_far() -> None:
    input_from = CUSTOM_CALL.index('"input": "') + len('"input": "')
    input_read = CUSTOM_CALL.index('"}')
    seen = []
    for cut in range(input_from, len(CUSTOM_CALL) + 1):
        (call,) = parse_cut_calls(CUSTOM_CALL[:cut], KNOWN)
        assert call.name == "run_sql" and QUERY.startswith(call.arguments), cut
        assert call.complete == (cut > input_read), cut
        seen.append(call.arguments)
    # Each cut gives as much as the text before it says, never half an escape: the input grows one character
    # at a time, and not at all while an escape is cut.
    assert seen == sorted(seen, key=len) and set(seen) == {QUERY[:length] for length in range(len(QUERY) + 1)}


def test_calls_before_the_cut_one_are_whole() -> None:
    text = f"{CALL}\n{CUSTOM_CALL}"
    cut = text.index("SELECT") + 3
    first, second = parse_cut_calls(text[:cut], KNOWN)
    assert first.complete and first.name == "get_weather"
    assert second == ParsedCall("run_sql", "SEL", complete=False)


def test_what_is_not_a_call_of_a_known_tool_is_left_out() -> None:
    assert parse_cut_calls(f'{CALL_OPEN}{{"name": "launch_rockets", "arguments": {{"n": ', KNOWN) == []
    assert parse_cut_calls(f'{CALL_OPEN}{{"name": ["get_weather"], "arguments": {{', KNOWN) == []
    assert parse_cut_calls(f"{CALL}plain words {CALL_OPEN}", KNOWN)[0].complete
    assert len(parse_cut_calls(f"{CALL}plain words {CALL_OPEN}", KNOWN)) == 1


def test_a_name_that_is_not_a_string_is_no_call() -> None:
    assert parse_calls(f'{CALL_OPEN}{{"name": ["get_weather"], "arguments": {{}}}}{CALL_CLOSE}', KNOWN) is None
