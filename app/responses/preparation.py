"""A create request and its rendered context -> a PreparedResponse: its parameters (with the model's defaults),
its output grammar, its Response (status queued) and its generation job. Pure but for building the grammar; the
context (context.py) and any compaction (compaction.py) come before it, in service.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.config import Settings
from app.db.base import utc_now
from app.errors import InvalidRequest
from app.generation.grammars import InvalidSchema, text_format_grammar
from app.generation.job import GenerationJob, JobClass
from app.generation.kv.reuse import KvReuse
from app.generation.prompt import PromptContext
from app.generation.tool_calls import CLIENT_TOOL_KINDS, parameter_types
from app.generation.types import PromptRenderer, SamplingParams
from app.idempotency.claims import Claim
from app.ids import new_id
from app.mcp.servers import McpSetup
from app.prompt_cache.diagnosis import Compared, Fingerprint, comparison_with, fingerprint_of
from app.responses.context import Context, conversation_id_of
from app.responses.schemas import CreateResponseRequest
from app.responses.tools import ToolSetup, echoed_tools
from app.schemas.items import ENCRYPTED_REASONING_INCLUDE
from app.schemas.responses import ConversationRef, ResponseObject, ResponseParams, default_text

DEFAULT_TOP_P = 1.0


def _params_of(request: CreateResponseRequest, settings: Settings, context: Context) -> ResponseParams:
    """The request's parameters, with the model's defaults (else the deployment's) where it gives none, the
    reasoning effort a configuration_update of its context set where it sets none, and the reasoning items of
    its context the model will not read."""
    model = context.model
    temperature = model.temperature if model.temperature is not None else settings.default_temperature
    reasoning = request.reasoning.model_dump(exclude_none=True) if request.reasoning else None
    if context.configured_effort is not None:
        reasoning = {**(reasoning or {}), "effort": context.configured_effort}
    return ResponseParams(
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens or model.max_output_tokens or settings.default_max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        prompt_cache_key=request.prompt_cache_key,
        prompt_cache_retention=request.prompt_cache_retention,
        prompt_cache_options=request.prompt_cache_options.echo() if request.prompt_cache_options else None,
        reasoning=reasoning,
        safety_identifier=request.safety_identifier,
        store=request.store is not False,
        background=bool(request.background),
        conversation=ConversationRef(id=conversation_id_of(request)) if request.conversation is not None else None,
        temperature=request.temperature if request.temperature is not None else temperature,
        top_p=request.top_p if request.top_p is not None else (model.top_p or DEFAULT_TOP_P),
        text=_text_of(request),
        tool_choice=request.tool_choice or "auto",
        tools=echoed_tools(request.tools or []),
        top_logprobs=request.top_logprobs or 0,
        truncation=request.truncation or "disabled",
        user=request.user,
        input_transformations=context.input_transformations or None,
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


async def _output_grammar(renderer: PromptRenderer, tools: ToolSetup, text_format: dict[str, Any] | None) -> str | None:
    """The grammar the generation samples with, built off the event loop (a big schema takes a while), and
    test-built with llama.cpp here: one that it still refuses is a 400, not a failed response."""
    param = "tools" if tools.grammar else "text.format.schema"
    grammar = tools.grammar or await asyncio.to_thread(_grammar_for, text_format)
    if grammar is not None and not await asyncio.to_thread(renderer.grammar_builds, grammar):
        raise InvalidRequest(
            "llama.cpp cannot build the grammar that this schema needs; simplify the schema.",
            param=param,
            code="invalid_json_schema" if param == "text.format.schema" else "invalid_function_parameters",
        )
    return grammar


async def _mcp_setup(
    request: CreateResponseRequest,
    rendered: RenderedContext,
    settings: Settings,
    text_format: dict[str, Any] | None,
    grammar: str | None,
) -> dict[str, Any] | None:
    """What the job needs to call the request's MCP servers' tools and go on from their results."""
    context = rendered.context
    if context.mcp is None:
        return None
    system, messages = await context.messages_off_loop(rendered.read)
    prompt = PromptContext(
        system=system,
        messages=tuple(messages),
        template_options=context.template_options,
        structured=context.renderer.structured,
        reasoning_tags=context.reasoning_tags,
        truncate=context.truncate,
    )
    # A forced call is forced once: the rounds after it answer under the text format's grammar alone.
    answer_grammar = await asyncio.to_thread(_grammar_for, text_format) if context.tools.grammar else grammar
    setup = McpSetup(
        servers=context.mcp.servers,
        tools=context.tools.mcp_tools,
        approvals=sorted(context.mcp.approvals),
        approved=[call.to_payload() for call in context.mcp.approved],
        failure=context.mcp.failure,
        prompt=prompt.to_payload(),
        answer_grammar=answer_grammar,
        max_calls=request.max_tool_calls or settings.mcp_max_calls,
        hosted=context.hosted.config,
    )
    return setup.to_payload()


def _fingerprint(
    request: CreateResponseRequest, rendered: RenderedContext, params: ResponseParams, *, warm_up: bool
) -> Fingerprint:
    """The hashes a later request's prompt_cache_diagnostics compare against (app/prompt_cache/diagnosis.py).

    A warm-up's are those of its context without the template's opening of the assistant's turn that ends its
    prompt: no answer follows that opening, so a turn chained on it goes on from the context before it (a user
    turn opens there), and the same request sent again to generate ends with it again. Either prompt begins with
    the context, and the engine reuses what it warmed of it."""
    context = rendered.context
    prompt = rendered.prompt
    opening = list(context.renderer.generation_prompt_tokens)
    if warm_up and opening and prompt[-len(opening) :] == opening:
        prompt = prompt[: -len(opening)]
    items = [
        *(item for turn in context.history for item in (*turn.input_items, *turn.output_items)),
        *context.items,
        *rendered.leading,
    ]
    settings = {
        "model": context.model.id,
        "prompt_cache_key": request.prompt_cache_key,
        "tools": request.tools or [],
        "text_format": params.text.get("format"),
        "reasoning_effort": request.reasoning.effort if request.reasoning else None,
        "verbosity": params.text.get("verbosity"),
        "service_tier": request.service_tier,
    }
    compactions = sum(1 for item in items if item.get("type") == "compaction")
    return fingerprint_of(settings, prompt, compactions)


@dataclass(frozen=True, slots=True)
class RenderedContext:
    """A context rendered: its prompt tokens, the output items that lead the response (the compaction item
    of an automatic compaction), and those items as the model read them after the context (its summary)."""

    context: Context
    prompt: list[int]
    leading: list[dict[str, Any]] = field(default_factory=list)
    read: list[dict[str, Any]] = field(default_factory=list)


class PreparedResponse:
    """A validated create request: its Response (status queued), its input items and its job."""

    def __init__(
        self,
        response: ResponseObject,
        job: GenerationJob,
        stream: bool,
        context: Context,
        created: datetime,
        fingerprint: Fingerprint,
    ) -> None:
        self.response = response
        #: Stored with it: what a later response's prompt_cache_diagnostics compare against.
        self.fingerprint = fingerprint
        #: When it was created, to the microsecond (the Response says the second): lists order by it.
        self.created = created
        self.job = job
        self.stream = stream
        self.context = context
        self.items = context.items
        #: Hosted tool types the request sent that cannot run here (named in a response header).
        self.ignored_tools = context.tools.ignored
        self.conversation = context.conversation
        #: The Idempotency-Key this create holds: stored with the response, in its transaction (submission.py).
        self.key_claim: Claim | None = None


def check_combination(request: CreateResponseRequest) -> None:
    if request.background and request.store is False:
        raise InvalidRequest("background requires store to be true.", param="background", code="invalid_value")
    if request.conversation is not None and request.previous_response_id is not None:
        raise InvalidRequest(
            "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or "
            "'conversation'.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )


async def prepare_response(
    request: CreateResponseRequest,
    rendered: RenderedContext,
    tenant: str,
    settings: Settings,
    *,
    response_id: str | None = None,
    job_class: JobClass | None = None,
    generate: bool = True,
    compared: Compared | None = None,
    keep_events: bool = False,
) -> PreparedResponse:
    """The last checks that can fail with a 400 (the output grammar), then the Response and its job: nothing is
    stored or generated here. `job_class`: where its job waits (default: by the request, see below). `generate`:
    False for a warm-up, whose job only reads the prompt into the model's cache (WebSocket `generate: false`, or
    `prompt_cache_options.prewarm`). `compared`: the response that prompt_cache_options.comparison_response_id
    names, as looked up. `keep_events`: store a foreground stream's events as a background stream's are (a create
    with an Idempotency-Key, whose retry replays them)."""
    context = rendered.context
    tools = context.tools
    params = _params_of(request, settings, context)
    options = request.prompt_cache_options
    generate = generate and not (options is not None and options.prewarm)
    fingerprint = _fingerprint(request, rendered, params, warm_up=not generate)
    comparison = (
        comparison_with(compared, fingerprint, rendered.prompt, KvReuse(settings.kv_reuse))
        if compared is not None
        else None
    )
    grammar = await _output_grammar(context.renderer, tools, params.text.get("format"))
    created = utc_now()
    response = ResponseObject(
        **params.model_dump(),
        id=response_id or new_id("resp"),
        created_at=int(created.timestamp()),
        status="queued",
        model=context.model.id,
        previous_response_id=request.previous_response_id,
    )
    job = GenerationJob(
        response_id=response.id,
        prompt_tokens=rendered.prompt,
        sampling=SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_output_tokens=params.max_output_tokens,
            grammar=grammar,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            top_logprobs=params.top_logprobs if request.wants_logprobs else None,
            prefill_only=not generate,
            read_cache=options is None or options.reads_cache,
            keep_state_file=options is not None and options.ttl == "12h",
        ),
        response=response.model_dump(mode="json"),
        store=params.store,
        keep_events=keep_events or (params.background and bool(request.stream)),
        announced=params.background and bool(request.stream),
        tenant=tenant,
        model=context.model.id,
        # Nobody waits on a background job: it yields to every create whose client does (batches set "batch").
        job_class=job_class or ("background" if params.background else "interactive"),
        functions={function.name: function.namespace for function in tools.functions},
        custom_tools=[function.name for function in tools.functions if function.kind == "custom"],
        tool_types=[function.name for function in tools.functions if function.kind in CLIENT_TOOL_KINDS],
        reasoning_tags=context.reasoning_tags,
        dialect=context.renderer.dialect,
        reasoning_open=context.reasoning_tags is not None
        and context.renderer.opens_reasoning(rendered.prompt, context.reasoning_tags[0]),
        parameter_types=parameter_types(tools.functions),
        encrypted_reasoning=ENCRYPTED_REASONING_INCLUDE in (request.include or []),
        parallel_tool_calls=params.parallel_tool_calls,
        affinity_key=context.affinity_key or response.id,
        conversation_id=context.conversation.conversation_id if context.conversation else None,
        conversation_input=context.items if context.conversation else [],
        leading_items=[*rendered.leading, *(context.mcp.items if context.mcp else [])],
        compaction_trigger=context.compaction_trigger,
        mcp=await _mcp_setup(request, rendered, settings, params.text.get("format"), grammar),
        cache_comparison=comparison.to_payload() if comparison is not None else None,
    )
    return PreparedResponse(
        response, job, stream=bool(request.stream), context=context, created=created, fingerprint=fingerprint
    )
