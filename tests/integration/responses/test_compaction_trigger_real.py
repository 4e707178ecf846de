"""A compaction_trigger through the openai SDK on the real model (embedded): the stream says compacting, the
output is the compaction item then the answer, and the next chained turn reads the compacted context. A
configuration_update and a reasoning item the model cannot read ride along."""

from __future__ import annotations

import openai
import pytest
from openai.types.responses import ResponseCompactionCompactingEvent

from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration


def test_a_trigger_compacts_then_answers(client: openai.OpenAI, model: str) -> None:
    first = client.responses.create(
        model=model,
        input=[
            {"type": "configuration_update", "reasoning": {"effort": "low"}},
            {"type": "reasoning", "id": "rs_client", "summary": [{"type": "summary_text", "text": "Think."}]},
            {"role": "user", "content": "My name is Ada. Say hello."},
        ],
        temperature=0,
        max_output_tokens=16,
    )
    assert first.reasoning is not None and first.reasoning.effort == "low"
    # SmolLM2 has no reasoning section: the reasoning item was withheld, and the Response says so.
    assert first.input_transformations is not None
    assert [(entry.id, entry.reason) for entry in first.input_transformations] == [("rs_client", "model_mismatch")]

    with client.responses.stream(
        model=model,
        input=[{"type": "compaction_trigger"}],
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=16,
    ) as stream:
        typed = list(stream)
    events = [event.model_dump(warnings=False) for event in typed]
    final = assert_well_formed_stream(events)
    compacting = [event for event in typed if isinstance(event, ResponseCompactionCompactingEvent)]
    assert len(compacting) == 1 and compacting[0].output_index == 0
    stored = client.responses.retrieve(final["id"])
    assert [item.type for item in stored.output][:2] == ["compaction", "message"]
    assert compacting[0].item_id == stored.output[0].id
    # The configuration update is in force on later turns of the chain.
    assert stored.reasoning is not None and stored.reasoning.effort == "low"
    assert list(client.responses.input_items.list(stored.id)) == []

    later = client.responses.create(
        model=model, input="What is my name?", previous_response_id=stored.id, temperature=0, max_output_tokens=16
    )
    assert later.status in ("completed", "incomplete") and later.usage is not None

    with pytest.raises(openai.BadRequestError) as misplaced:
        client.responses.create(model=model, input=[{"type": "compaction_trigger"}, {"role": "user", "content": "Hi"}])
    assert misplaced.value.body["param"] == "input[0]"
