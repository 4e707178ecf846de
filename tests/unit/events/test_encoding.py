"""An event's payload and JSON text as the stream sends them: the text delta written out by hand is exactly
pydantic's dump (keys and their order), and the shared encoder writes exactly json.dumps' compact text."""

from __future__ import annotations

import json

from app.events.assembler import ResponseAssembler
from app.events.encoding import EncodedEvent, event_json, event_payload
from app.generation.types import Finish, ScoredPiece
from app.ids import new_id
from app.schemas.events import OutputTextDeltaEvent
from app.schemas.responses import ResponseObject


def response() -> ResponseObject:
    return ResponseObject(id=new_id("resp"), created_at=0, status="in_progress", model="m")


def test_every_event_of_a_stream_is_pydantic_s_dump_key_for_key() -> None:
    assembler = ResponseAssembler(response())
    events = [*assembler.start()]
    for piece in ("Bread", " is", " baked", " at", " 220 °C", " \u2014 \U0001f35e", ' "hot"\n'):
        events += assembler.text(piece)
    events += assembler.finish(Finish("stop", 5, 0, 7), completed_at=1)
    deltas = [event for event in events if isinstance(event, OutputTextDeltaEvent)]
    assert len(deltas) == 7
    for event in events:
        assert list(event_payload(event).items()) == list(event.model_dump(mode="json").items())


def test_a_delta_with_logprobs_is_dumped_by_pydantic() -> None:
    assembler = ResponseAssembler(response(), logprobs=True)
    assembler.start()
    events = assembler.text(ScoredPiece("Bread", b"Bread", -0.25, ((b"Bun", -2.0),)))
    delta = events[-1]
    assert isinstance(delta, OutputTextDeltaEvent) and delta.logprobs
    payload = event_payload(delta)
    assert payload == delta.model_dump(mode="json")
    assert payload["logprobs"][0]["token"] == "Bread"


def test_the_json_text_is_json_dumps_compact_text() -> None:
    event = {"type": "response.output_text.delta", "delta": 'é "\u2028\n\U0001f35e', "logprobs": [], "n": 1.5}
    assert event_json(event) == json.dumps(event, separators=(",", ":"))
    received = EncodedEvent.parse('{"type": "x"}')
    assert event_json(received) == '{"type": "x"}'  # its own text, not encoded again
