"""prompt_cache_options and prompt_cache_diagnostics on the real model: a prewarm then the same request is a hit,
so is a turn chained on a prewarm, so is a chained turn, and each reason of a miss comes with a real KV state (the
engine reused the shared system prompt, not the rest)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import Response

from tests.protocol import SOCKET_EVENT, assert_well_formed_stream, socket_exchange

#: On SQLite only: what these prove is the engine's and the session's, not the database's (distributed mode's tests
#: run the same on Postgres), and each costs a minute or more on the CI machine.
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

#: A context long enough that its prefix state is saved (about 250 tokens).
RULES = " ".join(
    f"Rule {number}: the {thing} must be kept {state}."
    for number, (thing, state) in enumerate([("kettle", "warm"), ("gate", "locked"), ("bird", "fed")] * 7)
)
SHORT: dict[str, Any] = {"temperature": 0, "max_output_tokens": 16}
FUNCTION = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


def compared_with(response: Response) -> dict[str, Any]:
    return {"prompt_cache_options": {"comparison_response_id": response.id}}


def diagnostics(response: Response) -> dict[str, Any]:
    assert response.prompt_cache_diagnostics is not None
    return response.prompt_cache_diagnostics.model_dump(exclude_none=True)


def test_a_prewarm_then_the_same_request_is_a_hit(client: openai.OpenAI, model: str) -> None:
    fields: dict[str, Any] = {"model": model, "instructions": "You keep a kitchen (prewarm).", "input": RULES}
    warm = client.responses.create(**fields, prompt_cache_options={"prewarm": True})
    assert warm.output == [] and warm.usage is not None and warm.usage.output_tokens == 0
    assert warm.prompt_cache_options is not None and warm.prompt_cache_options.ttl == "30m"
    assert warm.prompt_cache_diagnostics is None
    turn = client.responses.create(**fields, **SHORT, **compared_with(warm))
    assert diagnostics(turn) == {"type": "cache_hit"}
    assert turn.usage is not None
    assert turn.usage.input_tokens_details.cached_tokens == warm.usage.input_tokens - 1
    assert turn.prompt_cache_options is not None and turn.prompt_cache_options.comparison_response_id == warm.id
    # The same on a read.
    assert diagnostics(client.responses.retrieve(turn.id)) == {"type": "cache_hit"}


def test_a_turn_chained_on_a_prewarm_is_a_hit(client: openai.OpenAI, model: str) -> None:
    # The warm-up's prompt ends with the template's opening of an answer that never came; the chained turn goes on
    # from the context before it, which the engine warmed.
    instructions = "You keep a pantry (prewarm chain)."
    warm = client.responses.create(
        model=model, instructions=instructions, input=RULES, prompt_cache_options={"prewarm": True}
    )
    turn = client.responses.create(
        model=model,
        instructions=instructions,
        input="Which rule is about the gate?",
        previous_response_id=warm.id,
        **SHORT,
        **compared_with(warm),
    )
    assert diagnostics(turn) == {"type": "cache_hit"}
    assert warm.usage is not None and turn.usage is not None
    # All of the warmed context: its prompt but the closing "<|im_start|>assistant\n" (3 tokens).
    assert turn.usage.input_tokens_details.cached_tokens >= warm.usage.input_tokens - 3


def test_a_chained_turn_is_a_hit(client: openai.OpenAI, model: str) -> None:
    # Instructions are not inherited along a chain: sent again, so the first prompt begins the second.
    instructions = "You keep a garden (chain)."
    first = client.responses.create(model=model, instructions=instructions, input=RULES, **SHORT)
    second = client.responses.create(
        model=model,
        instructions=instructions,
        input="Which rule is about the bird?",
        previous_response_id=first.id,
        **SHORT,
        **compared_with(first),
    )
    assert diagnostics(second) == {"type": "cache_hit"}
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, "input_changed"),
        ({"tools": [FUNCTION]}, "tools_changed"),
        ({"text": {"format": {"type": "json_object"}}}, "text_format_changed"),
        ({"prompt_cache_key": "another-key"}, "prompt_cache_key_changed"),
        ({"reasoning": {"effort": "high"}}, "reasoning_effort_changed"),
    ],
)
def test_each_reason_of_a_miss(client: openai.OpenAI, model: str, changes: dict[str, Any], reason: str) -> None:
    # Each case a system prompt of its own: the only state it can reuse is its base's.
    instructions = f"You keep a shed ({reason})."
    base = client.responses.create(
        model=model, instructions=instructions, input=RULES, prompt_cache_key="a-key", **SHORT
    )
    fields: dict[str, Any] = {"prompt_cache_key": "a-key", **changes}
    # The input differs from its start: the engine can reuse the system prompt only.
    missed = client.responses.create(
        model=model, instructions=instructions, input=f"Note. {RULES}", **SHORT, **fields, **compared_with(base)
    )
    assert base.usage is not None and missed.usage is not None
    cached = missed.usage.input_tokens_details.cached_tokens
    assert cached < base.usage.input_tokens - 100, missed.usage
    found = diagnostics(missed)
    assert found["type"] == "cache_miss"
    assert found["reason"] == reason
    assert found["cache_missed_tokens"] == missed.usage.input_tokens - cached
    assert 0 <= found["comparison_reusable_tokens"] <= cached + 32


def test_a_changed_setting_that_leaves_the_prompt_whole_still_hits(client: openai.OpenAI, model: str) -> None:
    """The cache here is keyed by the prompt's tokens (and the tenant): a new prompt_cache_key alone reuses it."""
    fields: dict[str, Any] = {"model": model, "instructions": "You keep a barn (key).", "input": RULES}
    base = client.responses.create(**fields, prompt_cache_key="one", **SHORT)
    again = client.responses.create(**fields, prompt_cache_key="two", **SHORT, **compared_with(base))
    assert diagnostics(again) == {"type": "cache_hit"}


def test_an_unknown_comparison_is_not_found(client: openai.OpenAI, model: str) -> None:
    reply = client.responses.create(
        model=model, input="Hi", **SHORT, prompt_cache_options={"comparison_response_id": "resp_unknown"}
    )
    assert diagnostics(reply) == {"type": "comparison_response_not_found"}


def test_a_bad_option_is_a_400_naming_it(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=model, input="Hi", prompt_cache_options={"ttl": "1d"})  # type: ignore[typeddict-item]
    assert raised.value.param == "prompt_cache_options.ttl"


def test_over_a_websocket_a_prewarm_unstored_then_a_turn_compared_with_it(client: openai.OpenAI, model: str) -> None:
    fields: dict[str, Any] = {"model": model, "instructions": "You keep a cellar (socket).", "store": False}
    with client.responses.connect() as connection:
        warm = assert_well_formed_stream(
            socket_exchange(connection, input=RULES, prompt_cache_options={"prewarm": True}, **fields),
            union=SOCKET_EVENT,
        )
        assert warm["output"] == [] and warm["usage"]["output_tokens"] == 0
        turn = assert_well_formed_stream(
            socket_exchange(
                connection,
                input=RULES,
                prompt_cache_options={"comparison_response_id": warm["id"]},
                **SHORT,
                **fields,
            ),
            union=SOCKET_EVENT,
        )
    assert turn["prompt_cache_diagnostics"] == {"type": "cache_hit"}
    assert turn["usage"]["input_tokens_details"]["cached_tokens"] == warm["usage"]["input_tokens"] - 1
