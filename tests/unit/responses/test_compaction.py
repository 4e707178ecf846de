"""Compaction with the fake model: /v1/responses/compact, the sealed compaction item (unreadable, unforgeable,
per tenant, keyed the same on every node), its expansion in later input, and automatic compaction."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest
from openai.types.responses import CompactedResponse, Response

from app.config import Settings
from app.generation.prompt import SUMMARY_HEADING
from app.main import create_app
from app.responses.compaction import COMPACTION_REQUEST
from app.secrets.keys import configured_keys
from app.secrets.sealer import ContentSealer, SealBroken
from app.testing.fakes import FAKE_REPLY, FakeRenderer, FakeRunner, fake_generation
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

SUMMARY = " ".join(FAKE_REPLY)
HISTORY = [
    {"role": "user", "content": "My name is Ada."},
    {"role": "assistant", "content": "Hello Ada."},
    {"role": "user", "content": "I like tea."},
]


async def compact(client: httpx.AsyncClient, **body: object) -> httpx.Response:
    return await client.post("/v1/responses/compact", json={"model": "fake-model", **body})


async def test_compact_keeps_user_messages_and_seals_the_rest(
    client: httpx.AsyncClient, renderer: FakeRenderer, runner: FakeRunner
) -> None:
    reply = await compact(client, input=HISTORY, instructions="Be brief.")
    assert reply.status_code == 200, reply.text
    # NOTE: the SDK types `output` as output items, which cannot hold the user messages (input_text) that the
    # hosted API returns there; the SDK builds it without validating, so compare all but the messages.
    compacted = CompactedResponse.model_validate({**reply.json(), "output": reply.json()["output"][-1:]})
    assert compacted.object == "response.compaction" and compacted.usage.output_tokens == len(FAKE_REPLY)
    *kept, item = reply.json()["output"]
    assert [message["content"][0]["text"] for message in kept] == ["My name is Ada.", "I like tea."]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    # No `created_by: null`: the Open Responses schema takes the field absent or a string (the SDK takes both).
    assert set(item) == {"type", "id", "encrypted_content"}
    assert "quick" not in base64.urlsafe_b64decode(item["encrypted_content"]).decode(errors="replace")
    # The model was asked for the summary after the whole context (the same prefix as the conversation).
    asked = renderer.rendered[-1]
    assert [message.content for message in asked] == ["Be brief.", *(m["content"] for m in HISTORY), COMPACTION_REQUEST]
    assert runner.jobs[-1].store is False

    # Sent back, the compaction item stands for the context: the model reads its summary.
    later = await client.post("/v1/responses", json={"input": [*kept, item, {"role": "user", "content": "And?"}]})
    assert later.status_code == 200, later.text
    assert [(message.role, message.content) for message in renderer.rendered[-1]] == [
        ("user", "My name is Ada."),
        ("user", "I like tea."),
        ("user", f"{SUMMARY_HEADING}\n{SUMMARY}"),
        ("user", "And?"),
    ]
    # Stored as it came: listed back still sealed.
    listed = (await client.get(f"/v1/responses/{later.json()['id']}/input_items", params={"order": "asc"})).json()
    assert listed["data"][2] == item


async def test_compact_a_chain(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/responses", json={"input": "One."})).json()
    second = (await client.post("/v1/responses", json={"input": "Two.", "previous_response_id": first["id"]})).json()
    reply = await compact(client, previous_response_id=second["id"], input="Three.")
    assert reply.status_code == 200, reply.text
    output = reply.json()["output"]
    assert [item["content"][0]["text"] for item in output[:-1]] == ["One.", "Two.", "Three."]
    assert output[-1]["type"] == "compaction"


def _tampered(token: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(token))
    raw[-1] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("forge", [_tampered, lambda _: "bm90IG91cnM=", lambda _: "%%%not base64", lambda t: t[:20]])
async def test_forged_or_corrupted_compaction_is_a_400_that_echoes_nothing(client: httpx.AsyncClient, forge) -> None:
    item = (await compact(client, input=HISTORY)).json()["output"][-1]
    forged = {**item, "encrypted_content": forge(item["encrypted_content"])}
    reply = await client.post("/v1/responses", json={"input": [forged, {"role": "user", "content": "hi"}]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input[0].encrypted_content" and error["code"] == "invalid_encrypted_content"
    assert "quick" not in reply.text and forged["encrypted_content"] not in reply.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": None, "input": "x"}, "model"),
        ({"model": "fake-model"}, "input"),
        ({"model": "another-model", "input": "x"}, "model"),
        ({"model": "fake-model", "previous_response_id": "resp_nope"}, "previous_response_id"),
        ({"model": "fake-model", "input": [{"type": "item_reference", "id": "msg_nope"}]}, "input[0].id"),
        ({"model": "fake-model", "input": "x", "prompt_cache_options": {"mode": "explicit"}}, "prompt_cache_options"),
        ({"model": "fake-model", "input": []}, "input"),
    ],
)
async def test_bad_compact_requests_are_a_400(client: httpx.AsyncClient, body: dict, param: str) -> None:
    reply = await client.post("/v1/responses/compact", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


async def test_automatic_compaction_leads_the_output(
    client: httpx.AsyncClient, renderer: FakeRenderer, runner: FakeRunner
) -> None:
    management = [{"type": "compaction", "compact_threshold": 12}]
    small = (await client.post("/v1/responses", json={"input": "Hi.", "context_management": management})).json()
    assert [item["type"] for item in small["output"]] == ["message"], "under the threshold nothing is compacted"

    reply = await client.post(
        "/v1/responses",
        json={"input": HISTORY, "context_management": management, "stream": True, "instructions": "Be brief."},
    )
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    Response.model_validate(final)
    assert [item["type"] for item in final["output"]] == ["compaction", "message"]
    added = [event for event in events if event["type"] == "response.output_item.added"]
    assert [(event["output_index"], event["item"]["type"]) for event in added] == [(0, "compaction"), (1, "message")]
    text_events = [event for event in events if event["type"] == "response.output_text.delta"]
    assert {event["output_index"] for event in text_events} == {1}
    # The summary was asked for, then the answer generated from the compacted context.
    assert renderer.rendered[-2][-1].content == COMPACTION_REQUEST
    assert [(message.role, message.content) for message in renderer.rendered[-1]] == [
        ("system", "Be brief."),
        ("user", "My name is Ada."),
        ("user", "I like tea."),
        ("user", f"{SUMMARY_HEADING}\n{SUMMARY}"),
    ]
    assert (await client.get(f"/v1/responses/{final['id']}")).json() == final

    # The next chained turn reads the compacted context, not the whole history again.
    chained = await client.post("/v1/responses", json={"input": "More?", "previous_response_id": final["id"]})
    assert chained.status_code == 200, chained.text
    assert [message.content for message in renderer.rendered[-1]] == [
        "My name is Ada.",
        "I like tea.",
        f"{SUMMARY_HEADING}\n{SUMMARY}",
        SUMMARY,
        "More?",
    ]
    assert len(runner.jobs) == 4, "three answers and one summary"


async def test_automatic_compaction_instead_of_a_context_too_long(
    client: httpx.AsyncClient, renderer: FakeRenderer
) -> None:
    long = [{"role": "user", "content": " ".join(["word"] * 120)}, {"role": "assistant", "content": "ok " * 120}]
    too_long = await client.post("/v1/responses", json={"input": [*long, {"role": "user", "content": "Now?"}]})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    body = {"input": [*long, {"role": "user", "content": "Now?"}], "context_management": [{"type": "compaction"}]}
    compacted = await client.post("/v1/responses", json=body)
    assert compacted.status_code == 200, compacted.text
    assert compacted.json()["output"][0]["type"] == "compaction"


async def test_sealing_keys(tmp_path: Path) -> None:
    payload = {"summary": "secret"}
    one = ContentSealer(configured_keys("first"))
    token = one.seal(payload, purpose="compaction", tenant="t")
    assert one.open(token, purpose="compaction", tenant="t") == payload
    with pytest.raises(SealBroken):
        one.open(token, purpose="compaction", tenant="someone else")
    with pytest.raises(SealBroken):
        one.open(token, purpose="another purpose", tenant="t")
    rotated = ContentSealer(configured_keys("second, first"))
    assert rotated.open(token, purpose="compaction", tenant="t") == payload, "old keys still open"
    with pytest.raises(SealBroken):
        ContentSealer(configured_keys("second")).open(token, purpose="compaction", tenant="t")

    # Without a configured key, every node of one database finds the same generated key.
    url = f"sqlite+aiosqlite:///{tmp_path / 'nodes.db'}"
    tokens = []
    for _ in range(2):
        app = create_app(
            Settings(database_url=url, model_id="m", _env_file=None), fake_generation(FakeRenderer(), FakeRunner())
        )
        async with app.router.lifespan_context(app):
            sealer = app.state.runtime.sealer
            tokens.append(sealer.seal(payload, purpose="p", tenant="t"))
            assert all(sealer.open(made, purpose="p", tenant="t") == payload for made in tokens)


async def test_a_compaction_item_opens_only_for_its_tenant(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, beta = two_tenants
    item = (await alpha.post("/v1/responses/compact", json={"model": "m", "input": HISTORY})).json()["output"][-1]
    assert (
        await alpha.post("/v1/responses", json={"input": [item, {"role": "user", "content": "x"}]})
    ).status_code == 200
    stolen = await beta.post("/v1/responses", json={"input": [item, {"role": "user", "content": "x"}]})
    assert stolen.status_code == 400 and stolen.json()["error"]["code"] == "invalid_encrypted_content"
