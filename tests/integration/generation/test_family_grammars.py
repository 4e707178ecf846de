"""What a family's grammar forces the model to write is what the family's parser reads: the shipped weights
(SmolLM2) generate under each family's forced-call grammar, for real in llama.cpp, and the text read back is one
call of the forced tool with arguments its schema accepts (a function, a custom tool with a pattern)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from jsonschema import Draft202012Validator

from app.config import Settings
from app.generation.dialects.families import DIALECTS, dialect_named
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.tool_calls import FunctionSpec, parameter_types
from app.generation.types import Finish, GenerationOutput, SamplingParams
from app.testing.scripted import read_output

pytestmark = pytest.mark.integration

WEATHER = FunctionSpec(
    "get_weather",
    "The weather in a city.",
    {
        "type": "object",
        # An enum: a free string written as XML text (or Gemma's) ends where the model chooses, and SmolLM2
        # rambles on; the families' JSON strings end at their quote.
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Rome"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
)
SQL = FunctionSpec("run_sql", "Run one query.", {}, kind="custom", input_pattern="SELECT [a-z]{1,12} FROM [a-z]{1,12}")


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    shipped = Settings(_env_file=None).resolved_model_path
    running = LlamaEngine(shipped, n_ctx=1024, n_threads=None, slots=1)
    yield running
    running.close()


def generate(engine: LlamaEngine, family: str, grammar: str) -> tuple[str, Finish]:
    pieces: list[str] = []
    done = threading.Event()
    finish: list[Finish] = []

    def emit(output: GenerationOutput) -> None:
        if isinstance(output, str):
            pieces.append(output)
        elif isinstance(output, Finish):
            finish.append(output)
            done.set()
        else:
            done.set()

    prompt = engine.tokenize("<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_output_tokens=400, grammar=grammar)
    engine.submit(GenerationRequest(prompt, sampling, emit, cache_scope="test", dialect=family))
    assert done.wait(600), "no answer"
    assert finish, "the generation failed"
    return "".join(pieces), finish[0]


@pytest.mark.parametrize("family", [dialect.name for dialect in DIALECTS])
def test_the_forced_call_is_read_back_as_that_call(engine: LlamaEngine, family: str) -> None:
    dialect = dialect_named(family)
    text, finish = generate(engine, family, dialect.grammar([WEATHER]))
    assert finish.reason == "stop", (finish, text)
    reading = read_output(family, text, {"get_weather": "function"}, parameter_types=parameter_types([WEATHER]))
    assert [call[0] for call in reading.calls] == ["get_weather"], text
    ((_, arguments, complete),) = reading.calls
    assert complete and Draft202012Validator(WEATHER.parameters).is_valid(json.loads(arguments)), text
    assert not reading.messages, f"markup read as text: {text!r}"


@pytest.mark.parametrize("family", ["hermes", "harmony", "mistral", "kimi", "deepseek_v3"])
def test_a_forced_custom_call_keeps_its_pattern(engine: LlamaEngine, family: str) -> None:
    text, _ = generate(engine, family, dialect_named(family).grammar([SQL]))
    reading = read_output(family, text, {"run_sql": "custom"}, parameter_types=parameter_types([SQL]))
    ((_, query, complete),) = reading.calls
    assert complete and query.startswith("SELECT "), text
