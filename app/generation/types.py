"""Plain values that cross between the engine, the queues and the services (no llama_cpp import here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.generation.prompt import ChatMessage

#: Room a prompt must leave for the answer; matches the API's minimum max_output_tokens.
MIN_OUTPUT_TOKENS = 16

#: "steered": stopped at a safe boundary for steering input (WebSocket `response.steer`); the runner itself never
#: says it (its run was cancelled), the job that asked for the stop does.
FinishReason = Literal["stop", "length", "cancelled", "steered"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float
    top_p: float
    max_output_tokens: int | None
    #: GBNF that every sampled token must keep satisfiable (structured output); None: free text.
    grammar: str | None = None
    #: OpenAI's penalties on tokens already generated (llama.cpp's penalty sampler); 0 leaves it out.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: None: no logprobs (the fast path). N >= 0: each token's logprob and its N likeliest alternatives.
    top_logprobs: int | None = None
    #: A takeover: the prompt's last N tokens are the output an earlier run wrote. They go through the sampler
    #: (its grammar's state, its penalties) before it samples, as if this run had sampled them.
    resumed_output_tokens: int = 0
    #: A warm-up (WebSocket `generate: false`): the prompt is read into a sequence, so that its cells stay in the
    #: prefix cache for the turn chained on it, and nothing is sampled (Finish "stop", no output tokens).
    prefill_only: bool = False
    #: False: the prompt is read cold, reusing no cached KV state (prompt_cache_options.mode "explicit").
    read_cache: bool = True
    #: Its state is also written to the state files, when there are any (prompt_cache_options.ttl "12h").
    keep_state_file: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    """The last thing a generation yields after its text pieces."""

    reason: FinishReason
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class GenerationFailed:
    """The engine raised: the run ends with this instead of a Finish."""

    message: str


@dataclass(frozen=True, slots=True)
class ScoredPiece:
    """A token's text (what it completes of the UTF-8 stream, possibly "") with its logprob, for requests that
    asked for logprobs. Logprobs are the model's own: log-softmax of its logits, before penalties, grammar,
    temperature and top_p."""

    text: str
    token_bytes: bytes
    logprob: float
    #: The likeliest tokens, most likely first: (bytes, logprob).
    top: tuple[tuple[bytes, float], ...] = ()


GenerationOutput = str | ScoredPiece | Finish | GenerationFailed


class PromptRenderer(Protocol):
    """Conversation -> prompt tokens within the context window (ChatTokenizer; a fake in unit tests)."""

    n_ctx: int
    #: The model's (open, close) reasoning markers, or None for a model without a reasoning section.
    reasoning_tags: tuple[str, str] | None
    #: The chat template renders a `tools` list itself (else tools go into the system prompt, our way).
    supports_tools: bool
    #: The chat template renders calls (`tool_calls`) and results (`tool` messages) itself: the conversation is
    #: given to it as structured messages (else as our convention's text, app/generation/tool_calls.py).
    structured: bool
    #: The model family whose syntax its output is read in (app/generation/dialects).
    dialect: str

    @property
    def generation_prompt_tokens(self) -> tuple[int, ...]:
        """The tokens the chat template ends a prompt with to open the assistant's turn (empty: unknown)."""
        ...

    def render_within_context(
        self,
        system: ChatMessage | None,
        conversation: Sequence[ChatMessage],
        *,
        truncate: bool,
        template_options: Mapping[str, Any] | None = None,
    ) -> list[int]: ...

    def opens_reasoning(self, prompt: Sequence[int], opening: str) -> bool:
        """Whether `prompt` ends by opening the reasoning section (`opening`, its marker): the template's
        generation prompt did (DeepSeek R1, Qwen3.5, GLM-4.7 thinking), so the output starts inside it."""
        ...

    def grammar_builds(self, grammar: str) -> bool:
        """Whether llama.cpp builds `grammar` (checked where the request arrives, so that one it cannot build is a
        400 rather than a failed generation)."""
        ...


class EngineError(RuntimeError):
    """llama.cpp failed: a model or context that would not load, a grammar it would not parse, a failed decode."""


class ModelLoadError(RuntimeError):
    """A model's weights (or vocabulary) could not be loaded: the requests for it fail, the others go on."""

    def __init__(self, model: str, cause: object) -> None:
        super().__init__(f"The model '{model}' could not be loaded: {cause}")
        self.model = model


class ContextTooLong(ValueError):
    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"Your input is {prompt_tokens} tokens, which does not fit the model's context window of {n_ctx} "
            f"tokens with room for {MIN_OUTPUT_TOKENS} output tokens. Shorten the input or set "
            "truncation to 'auto'."
        )
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
