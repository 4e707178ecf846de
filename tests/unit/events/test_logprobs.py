"""Logprobs: on output_text parts and text deltas when asked for, tokens concatenating to the text exactly (split
UTF-8 characters and text held back around tags included); `[]` otherwise, and nothing computed."""

from __future__ import annotations

import httpx
import pytest

from app.events.assembler import ResponseAssembler
from app.events.logprobs import TokenLogprobs
from app.generation.types import Finish, ScoredPiece
from app.ids import new_id
from app.schemas.responses import ResponseObject
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_exact_response, assert_well_formed_stream

LOGPROBS = "message.output_text.logprobs"


def piece(text: str, token_bytes: bytes | None = None, logprob: float = -0.5) -> ScoredPiece:
    return ScoredPiece(text, text.encode() if token_bytes is None else token_bytes, logprob, ((b"x", -1.0),))


def assemble(pieces: list[ScoredPiece | str], **options: object) -> tuple[ResponseAssembler, list[dict]]:
    response = ResponseObject(id=new_id("resp"), created_at=0, status="in_progress", model="m")
    assembler = ResponseAssembler(response, logprobs=True, **options)  # type: ignore[arg-type]
    events = [event.model_dump(mode="json") for event in assembler.start()]
    for each in pieces:
        events += [event.model_dump(mode="json") for event in assembler.text(each)]
    events += [
        event.model_dump(mode="json") for event in assembler.finish(Finish("stop", 3, 0, len(pieces)), completed_at=1)
    ]
    return assembler, events


def assert_tokens_spell_their_text(events: list[dict]) -> None:
    for event in events:
        if event["type"] == "response.output_text.delta":
            assert "".join(token["token"] for token in event["logprobs"]) == event["delta"], event
        if event["type"] == "response.output_text.done":
            assert "".join(token["token"] for token in event["logprobs"]) == event["text"], event
        if event["type"] == "response.content_part.done":
            part = event["part"]
            assert "".join(token["token"] for token in part["logprobs"]) == part["text"]
            assert b"".join(bytes(token["bytes"]) for token in part["logprobs"]) == part["text"].encode()


def test_a_character_split_across_tokens_spells_the_text_and_its_bytes() -> None:
    dash = "—".encode()  # three bytes, read as two tokens: the first completes no character
    _, events = assemble([piece("Hi "), piece("", dash[:2], -0.1), piece("—", dash[2:], -0.2), piece(" ok")])
    assert_tokens_spell_their_text(events)
    part = next(event["part"] for event in events if event["type"] == "response.content_part.done")
    assert [token["token"] for token in part["logprobs"]] == ["Hi ", "", "—", " ok"]
    assert [token["bytes"] for token in part["logprobs"]][1:3] == [list(dash[:2]), list(dash[2:])]
    assert part["logprobs"][1]["logprob"] == -0.1
    assert part["logprobs"][0]["top_logprobs"] == [{"token": "x", "bytes": [120], "logprob": -1.0}]


def test_text_held_back_around_a_tool_tag_is_still_spelled_by_its_tokens() -> None:
    # "<" might open a tool call, so it waits; the token "a <" is cut in two by that wait.
    pieces = [piece("Look"), piece("a <"), piece("b")]
    _, events = assemble(pieces, functions={"f": None})
    assert_tokens_spell_their_text(events)
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert [event["delta"] for event in deltas] == ["Look", "a ", "<b"]
    assert [token["token"] for token in deltas[2]["logprobs"]] == ["<", "b"]


def test_a_call_after_text_leaves_only_the_texts_tokens_on_the_part() -> None:
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assembler, events = assemble([piece("Sure. "), piece(call)], functions={"f": None})
    assert_tokens_spell_their_text(events)
    assert [item.type for item in assembler.response.output] == ["message", "function_call"]


def test_a_decoder_flush_without_a_token_joins_the_last_token() -> None:
    logprobs = TokenLogprobs()
    logprobs.add(piece("ab"), 0)
    logprobs.add(piece("", b"\xe2"), 2)
    logprobs.extend_last(3)  # the engine's final flush: "\ufffd"
    text = "ab\ufffd"
    assert "".join(token.token for token in logprobs.for_part(text, 0)) == text
    assert [token.token for token in logprobs.for_part(text[1:], 1)] == ["b", "\ufffd"]


async def test_asked_for_they_are_on_the_part_and_every_delta(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    reply = await client.post(
        "/v1/responses", json={"input": "hi", "include": [LOGPROBS], "top_logprobs": 3, "stream": True}
    )
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert_tokens_spell_their_text(events)
    logprobs = final["output"][0]["content"][0]["logprobs"]
    assert len(logprobs) == len(runner.reply) and all(len(token["top_logprobs"]) == 3 for token in logprobs)
    assert logprobs[1] == {
        "token": " quick",
        "bytes": list(b" quick"),
        "logprob": -0.6,
        "top_logprobs": [
            {"token": " QUICK" + "!" * rank, "bytes": list(b" QUICK" + b"!" * rank), "logprob": -0.6 - rank}
            for rank in range(3)
        ],
    }
    delta = next(event for event in events if event["type"] == "response.output_text.delta")
    assert set(delta["logprobs"][0]) == {"token", "logprob", "top_logprobs"}  # the SDK's delta shape: no bytes
    assert final["top_logprobs"] == 3 and runner.jobs[-1].sampling.top_logprobs == 3
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored == final and assert_exact_response(stored)


async def test_the_include_alone_gives_tokens_without_alternatives(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "include": [LOGPROBS]})).json()
    logprobs = created["output"][0]["content"][0]["logprobs"]
    assert "".join(token["token"] for token in logprobs) == created["output"][0]["content"][0]["text"]
    assert all(token["top_logprobs"] == [] for token in logprobs)
    assert runner.jobs[-1].sampling.top_logprobs == 0


async def test_not_asked_for_they_are_empty_and_not_computed(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "top_logprobs": 0})).json()
    assert created["output"][0]["content"][0]["logprobs"] == []
    assert runner.jobs[-1].sampling.top_logprobs is None


@pytest.mark.parametrize("value", [-1, 21, 2.5, "five"])
async def test_top_logprobs_outside_0_to_20_is_a_400(client: httpx.AsyncClient, value: object) -> None:
    reply = await client.post("/v1/responses", json={"input": "hi", "top_logprobs": value})
    assert_error(reply, 400, param="top_logprobs", code="invalid_value")


async def test_top_logprobs_alone_asks_for_them_too(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "top_logprobs": 2})).json()
    logprobs = created["output"][0]["content"][0]["logprobs"]
    assert logprobs and all(len(token["top_logprobs"]) == 2 for token in logprobs)
