"""A create request -> a PreparedResponse: everything that can fail with a 400 happens here, before anything
is stored or generated (parameters, tools, the context, the rendered prompt, the generation job).

`render_context` is the part that builds the context and renders the prompt: input token counts call it alone,
so that they count exactly what a create would read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.errors import InvalidRequest
from app.generation.grammars import InvalidSchema, text_format_grammar
from app.generation.prompt import Turn, build_context
from app.generation.tool_calls import template_tool
from app.generation.types import ContextTooLong, SamplingParams
from app.ids import new_id
from app.queue.base import GenerationJob
from app.runtime import Runtime
from app.schemas.requests import ENCRYPTED_REASONING_INCLUDE, CreateResponseRequest
from app.schemas.responses import ResponseObject, ResponseParams, default_text
from app.services.context import ConnectionChain, check_call_outputs, load_history
from app.services.input_normalization import normalize_input
from app.services.tools import ToolSetup, echoed_tools, resolve_tools
from app.services.validation import resolve_model

DEFAULT_TOP_P = 1.0


def _params_of(request: CreateResponseRequest, settings: Settings) -> ResponseParams:
    """The request's parameters, with the deployment's defaults where it gives none."""
    return ResponseParams(
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens or settings.default_max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        prompt_cache_key=request.prompt_cache_key,
        prompt_cache_retention=request.prompt_cache_retention,
        reasoning=request.reasoning.model_dump(exclude_none=True) if request.reasoning else None,
        safety_identifier=request.safety_identifier,
        store=request.store is not False,
        background=bool(request.background),
        temperature=request.temperature if request.temperature is not None else settings.default_temperature,
        top_p=request.top_p if request.top_p is not None else DEFAULT_TOP_P,
        text=_text_of(request),
        tool_choice=request.tool_choice or "auto",
        tools=echoed_tools(request.tools or []),
        top_logprobs=request.top_logprobs or 0,
        truncation=request.truncation or "disabled",
        user=request.user,
    )


def _text_of(request: CreateResponseRequest) -> dict[str, Any]:
    text = default_text()
    if request.text is not None:
        text.update(request.text.model_dump(exclude_none=True, by_alias=True))
    return text


def _grammar_for(text_format: dict[str, Any] | None) -> str | None:
    try:
        return text_format_grammar(text_format)
    except InvalidSchema as error:
        raise InvalidRequest(str(error), param="text.format.schema", code="invalid_json_schema") from None


class PreparedResponse:
    """A validated create request: its Response (status queued), its input items and its job."""

    def __init__(
        self,
        response: ResponseObject,
        items: list[dict[str, Any]],
        job: GenerationJob,
        stream: bool,
        ignored_tools: list[str],
        context: RenderedContext,
    ) -> None:
        self.response = response
        self.items = items
        self.job = job
        self.stream = stream
        #: Hosted tool types the request sent that cannot run here (named in a response header).
        self.ignored_tools = ignored_tools
        self.context = context


@dataclass(frozen=True, slots=True)
class RenderedContext:
    """A request's context as the model reads it, and what it was built from."""

    prompt: list[int]
    #: The request's own input items, normalised (each with an id).
    items: list[dict[str, Any]]
    tools: ToolSetup
    #: The earlier turns of its chain, oldest first, and the chain's first response.
    history: list[Turn]
    chain_root: str | None
    reasoning_tags: tuple[str, str] | None


async def render_context(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> RenderedContext:
    """Tools, input, history -> the prompt tokens. `connection`: a WebSocket connection's unstored last
    response, which `previous_response_id` may name."""
    tools = resolve_tools(request.tools, request.tool_choice, strict=runtime.settings.strict_tools)
    items = normalize_input(request.input)
    history: list[Turn] = []
    chain_root: str | None = None
    if connection is not None and request.previous_response_id == connection.response_id:
        if request.store is not False:
            raise InvalidRequest(
                f"Previous response '{connection.response_id}' was not stored; a response that continues it "
                "must be created with store: false too.",
                param="store",
                code="invalid_value",
            )
        history, chain_root = list(connection.turns), connection.chain_root
    elif request.previous_response_id is not None:
        async with runtime.sessionmaker() as session:
            history, chain_root = await load_history(session, request.previous_response_id, tenant)
    check_call_outputs(history, items)
    reasoning_tags = runtime.tokenizer.reasoning_tags
    # A template with tool support shows the tools its own way; otherwise the system prompt offers them.
    native_tools = runtime.tokenizer.supports_tools and bool(tools.functions)
    system, conversation = build_context(
        instructions=request.instructions,
        history=history,
        new_items=items,
        functions=() if native_tools else tools.functions,
        reasoning_tags=reasoning_tags,
    )
    # Templates read the variables they understand and ignore the others.
    template_options: dict[str, Any] = {}
    if request.reasoning and request.reasoning.effort:
        template_options["reasoning_effort"] = request.reasoning.effort
    if native_tools:
        template_options["tools"] = [template_tool(function) for function in tools.functions]
    if not conversation:
        raise InvalidRequest("The input must contain at least one message.", param="input", code="invalid_value")
    try:
        prompt = await asyncio.to_thread(
            runtime.tokenizer.render_within_context,
            system,
            conversation,
            truncate=request.truncation == "auto",
            template_options=template_options or None,
        )
    except ContextTooLong as error:
        raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    return RenderedContext(prompt, items, tools, history, chain_root, reasoning_tags)


async def prepare_response(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> PreparedResponse:
    """Everything that can fail with a 400 happens here, before anything is stored or generated."""
    model = resolve_model(request.model, runtime.settings, runtime.model_id)
    if request.background and request.store is False:
        raise InvalidRequest("background requires store to be true.", param="background", code="invalid_value")
    context = await render_context(request, tenant, runtime, connection=connection)
    tools = context.tools
    params = _params_of(request, runtime.settings)
    response = ResponseObject(
        **params.model_dump(),
        id=new_id("resp"),
        created_at=int(time.time()),
        status="queued",
        model=model,
        previous_response_id=request.previous_response_id,
    )
    job = GenerationJob(
        response_id=response.id,
        prompt_tokens=context.prompt,
        sampling=SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_output_tokens=params.max_output_tokens,
            grammar=tools.grammar or _grammar_for(params.text.get("format")),
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            top_logprobs=params.top_logprobs if request.wants_logprobs else None,
        ),
        response=response.model_dump(mode="json"),
        store=params.store,
        keep_events=params.background and bool(request.stream),
        functions={function.name: function.namespace for function in tools.functions},
        custom_tools=[function.name for function in tools.functions if function.kind == "custom"],
        reasoning_tags=context.reasoning_tags,
        encrypted_reasoning=ENCRYPTED_REASONING_INCLUDE in (request.include or []),
        parallel_tool_calls=params.parallel_tool_calls,
        affinity_key=request.prompt_cache_key or context.chain_root or response.id,
    )
    return PreparedResponse(
        response, context.items, job, stream=bool(request.stream), ignored_tools=tools.ignored, context=context
    )
