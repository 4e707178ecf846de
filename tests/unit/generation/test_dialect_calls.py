"""Reading calls back out of the model's text: our convention (Hermes) whole and cut off at every point, a list of calls
that holds something else, and jobs queued before jobs named their dialect."""

from __future__ import annotations

import json

from app.generation.dialects.families import dialect_named
from app.generation.job import GenerationJob
from app.generation.tool_calls import CALL_CLOSE, CALL_OPEN
from app.generation.types import SamplingParams
from app.testing.scripted import read_output

KNOWN = {"get_weather": "function", "run_sql": "custom"}
ARGUMENTS = '{"city": "Par\\u00eds", "days": [1, 2]}'
CALL = f'{CALL_OPEN}{{"name": "get_weather", "arguments": {ARGUMENTS}}}{CALL_CLOSE}'
QUERY = 'SELECT "a\\b" FROM t\n'
CUSTOM_CALL = f"{CALL_OPEN}{json.dumps({'name': 'run_sql', 'input': QUERY})}{CALL_CLOSE}"


def calls(text: str, *, cut: bool = True) -> list[tuple[str, str, bool]]:
    return read_output("hermes", text, KNOWN, cut=cut).calls


def test_a_function_call_cut_anywhere_is_read_as_far_as_it_got() -> None:
    name_read = CALL.index('"get_weather"') + len('"get_weather"')
    arguments_from = CALL.index(ARGUMENTS)
    arguments_read = arguments_from + len(ARGUMENTS)
    for cut in range(len(CALL) + 1):
        found = calls(CALL[:cut])
        if cut < name_read:
            assert found == [], cut
        elif cut < arguments_read:
            so_far = CALL[arguments_from:cut] if cut > arguments_from else ""
            assert found == [("get_weather", so_far, False)], cut
        else:  # the arguments are whole (as written): only the call's closing brace or tag was cut
            assert found == [("get_weather", ARGUMENTS, True)], cut


def test_a_custom_call_cut_anywhere_has_its_input_so_far() -> None:
    input_from = CUSTOM_CALL.index('"input": "') + len('"input": "')
    input_read = CUSTOM_CALL.index('"}')
    seen = []
    for cut in range(input_from, len(CUSTOM_CALL) + 1):
        ((name, text, complete),) = calls(CUSTOM_CALL[:cut])
        assert name == "run_sql" and QUERY.startswith(text), cut
        assert complete == (cut > input_read), cut
        seen.append(text)
    # Each cut gives as much as the text before it says, never half an escape: the input grows one character
    # at a time, and not at all while an escape is cut.
    assert seen == sorted(seen, key=len) and set(seen) == {QUERY[:length] for length in range(len(QUERY) + 1)}


def test_calls_before_the_cut_one_are_whole() -> None:
    text = f"{CALL}\n{CUSTOM_CALL}"
    cut = text.index("SELECT") + 3
    first, second = calls(text[:cut])
    assert first[2] and first[0] == "get_weather"
    assert second == ("run_sql", "SEL", False)


def test_what_is_not_a_call_of_a_known_tool_is_text_or_left_out() -> None:
    assert calls(f'{CALL_OPEN}{{"name": "launch_rockets", "arguments": {{"n": ') == []
    assert calls(f'{CALL_OPEN}{{"name": ["get_weather"], "arguments": {{') == []
    reading = read_output("hermes", f"{CALL}plain words {CALL_OPEN}", KNOWN, cut=True)
    assert [call[2] for call in reading.calls] == [True]
    assert reading.messages == [(None, "plain words")], "the markup a cut left opening is no text"


def test_a_name_that_is_not_a_string_is_no_call() -> None:
    text = f'{CALL_OPEN}{{"name": ["get_weather"], "arguments": {{}}}}{CALL_CLOSE}'
    reading = read_output("hermes", text, KNOWN)
    assert reading.calls == [] and reading.messages == [(None, text)]


def test_members_in_another_order_are_read_when_the_object_ends() -> None:
    text = f'{CALL_OPEN}{{"arguments": {{"city": "Oslo"}}, "name": "get_weather"}}{CALL_CLOSE}'
    assert calls(text, cut=False) == [("get_weather", '{"city": "Oslo"}', True)]


def test_a_job_queued_before_jobs_named_their_dialect_still_runs_in_our_convention() -> None:
    job = GenerationJob("resp_1", [1], SamplingParams(0.0, 1.0, 16), {"model": "m"}, True, False, "t")
    payload = job.to_payload()
    for field in ("dialect", "reasoning_open", "parameter_types"):
        del payload[field]
    old = GenerationJob.from_payload(payload)
    assert (old.dialect, old.reasoning_open, old.parameter_types) == ("hermes", False, {})
    newer = GenerationJob.from_payload({**job.to_payload(), "dialect": "a-family-of-a-later-version"})
    assert dialect_named(newer.dialect).name == "hermes"


def test_an_object_of_a_list_that_is_no_call_is_left_out_and_the_others_read() -> None:
    """A list that opens with a call holds calls: an object in it that is none (a tool not offered, braces in its
    strings) is left out; a list that opens with no call is text, as the model wrote it."""
    weather = '{"name": "get_weather", "arguments": {}}'
    rockets = '{"name": "launch_rockets", "arguments": {"n": [1, {"x": "}"}]}}'
    for cut in (False, True):
        reading = read_output("mistral_json", f"[TOOL_CALLS][{weather}, {rockets}, {weather}]", KNOWN, cut=cut)
        assert reading.calls == [("get_weather", "{}", True)] * 2 and reading.messages == []
    reading = read_output("mistral_json", f"[TOOL_CALLS][{rockets}, {weather}]", KNOWN)
    assert reading.calls == [] and reading.messages == [(None, f"[TOOL_CALLS][{rockets}, {weather}]")]
