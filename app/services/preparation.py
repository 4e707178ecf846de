"""A create request -> a PreparedResponse: everything that can fail with a 400 happens here, before anything
is stored or generated (parameters, tools, the context, the rendered prompt, the generation job)."""

from __future__ import annotations

import asyncio
import time
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
from app.schemas.requests import CreateResponseRequest
from app.schemas.responses import ResponseObject, ResponseParams
from app.services.context import check_call_outputs, load_history
from app.services.input_normalization import normalize_input
from app.services.tools import resolve_tools
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
        prompt_cache_key=request.prompt_cache_key,
        reasoning=request.reasoning.model_dump(exclude_none=True) if request.reasoning else None,
        safety_identifier=request.safety_identifier,
        store=request.store is not False,
        background=bool(request.background),
        temperature=request.temperature if request.temperature is not None else settings.default_temperature,
        top_p=request.top_p if request.top_p is not None else DEFAULT_TOP_P,
        text=request.text.model_dump(exclude_none=True, by_alias=True)
        if request.text and request.text.format
        else {"format": {"type": "text"}},
        tool_choice=request.tool_choice or "auto",
        tools=request.tools or [],
        truncation=request.truncation or "disabled",
        user=request.user,
    )


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
    ) -> None:
        self.response = response
        self.items = items
        self.job = job
        self.stream = stream
        #: Hosted tool types the request sent that cannot run here (named in a response header).
        self.ignored_tools = ignored_tools


async def prepare_response(request: CreateResponseRequest, tenant: str, runtime: Runtime) -> PreparedResponse:
    """Everything that can fail with a 400 happens here, before anything is stored or generated."""
    model = resolve_model(request.model, runtime.settings, runtime.model_id)
    if request.background and request.store is False:
        raise InvalidRequest("background requires store to be true.", param="background", code="invalid_value")
    tools = resolve_tools(request.tools, request.tool_choice, strict=runtime.settings.strict_tools)
    items = normalize_input(request.input)
    history: list[Turn] = []
    chain_root: str | None = None
    if request.previous_response_id is not None:
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
        prompt_tokens=prompt,
        sampling=SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_output_tokens=params.max_output_tokens,
            grammar=tools.grammar or _grammar_for(params.text.get("format")),
        ),
        response=response.model_dump(mode="json"),
        store=params.store,
        keep_events=params.background and bool(request.stream),
        functions={function.name: function.namespace for function in tools.functions},
        custom_tools=[function.name for function in tools.functions if function.kind == "custom"],
        reasoning_tags=reasoning_tags,
        encrypted_reasoning="reasoning.encrypted_content" in (request.include or []),
        affinity_key=request.prompt_cache_key or chain_root or response.id,
    )
    return PreparedResponse(response, items, job, stream=bool(request.stream), ignored_tools=tools.ignored)
