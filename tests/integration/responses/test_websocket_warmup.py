"""WebSocket `generate: false` on the real model: a warm-up reads the context into the prefix cache, and the turn
chained on it reads that prefix from the cache."""

from __future__ import annotations

import openai
import pytest

from tests.protocol import SOCKET_EVENT, assert_well_formed_stream, socket_exchange

pytestmark = pytest.mark.integration

#: A context no earlier test sent (about 370 tokens): only the warm-up can have put it in the cache.
RULES = " ".join(
    f"Rule {number}: the {thing} must be kept {state}."
    for number, (thing, state) in enumerate([("door", "shut"), ("lamp", "lit"), ("cat", "fed"), ("log", "signed")] * 8)
)
#: What the chained turn does not share with the warm-up's prompt: the opening of the assistant turn the warm-up
#: ended with ("<|im_start|>assistant\n" in SmolLM2's template), where the chained turn has its new user turn.
ASSISTANT_OPENING_TOKENS = 3


@pytest.mark.parametrize("store", [True, False])
def test_a_warm_up_then_a_chained_turn_reads_the_context_from_the_cache(
    client: openai.OpenAI, model: str, store: bool
) -> None:
    instructions = f"You keep a house (store: {store})."  # each case a context of its own
    with client.responses.connect() as connection:
        warm_events = socket_exchange(
            connection, model=model, instructions=instructions, input=RULES, store=store, generate=False
        )
        warm = assert_well_formed_stream(warm_events, union=SOCKET_EVENT)
        assert [event["type"] for event in warm_events][-1] == "response.completed"
        assert warm["status"] == "completed" and warm["output"] == []
        assert warm["usage"]["output_tokens"] == 0 and warm["usage"]["input_tokens"] > 300
        # Nothing of it was cached before: the context is new.
        assert warm["usage"]["input_tokens_details"]["cached_tokens"] < 32
        turn = assert_well_formed_stream(
            socket_exchange(
                connection,
                model=model,
                instructions=instructions,
                input="Which rule is about the cat?",
                previous_response_id=warm["id"],
                store=store,
                temperature=0,
                max_output_tokens=16,
            ),
            union=SOCKET_EVENT,
        )
    assert turn["usage"]["input_tokens"] > warm["usage"]["input_tokens"]
    cached = turn["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= warm["usage"]["input_tokens"] - ASSISTANT_OPENING_TOKENS, turn["usage"]
    assert turn["output"][0]["content"][0]["text"]
    if store:
        assert client.responses.retrieve(warm["id"]).output == []


def test_codex_s_warm_up_then_a_turn_with_no_new_input(client: openai.OpenAI, model: str) -> None:
    """Codex CLI's shape: the turn's whole request with `generate: false`, then the same request with
    previous_response_id naming the warm-up and only what is new as input: nothing (an empty list)."""
    fields = {"model": model, "instructions": "You are a coding agent.", "store": False}
    user = [{"type": "message", "role": "user", "content": f"{RULES} Say which rule is the third."}]
    with client.responses.connect() as connection:
        warm = assert_well_formed_stream(
            socket_exchange(connection, input=user, generate=False, **fields), union=SOCKET_EVENT
        )
        turn = assert_well_formed_stream(
            socket_exchange(
                connection, input=[], previous_response_id=warm["id"], temperature=0, max_output_tokens=16, **fields
            ),
            union=SOCKET_EVENT,
        )
    # The same prompt: all of it is read from the cache but its last token (whose logits start the answer).
    assert turn["usage"]["input_tokens"] == warm["usage"]["input_tokens"]
    assert turn["usage"]["input_tokens_details"]["cached_tokens"] == warm["usage"]["input_tokens"] - 1
    assert turn["output"][0]["content"][0]["text"]
