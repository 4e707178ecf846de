"""A create request -> a PreparedResponse: everything that can fail with a 400 happens here, before anything
is stored or generated (parameters, tools, the context, the rendered prompt, the generation job).

`render_context` is the part that builds the context and renders the prompt: input token counts call it alone,
so that they count exactly what a create would read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.config import Settings
from app.db.base import utc_now
from app.errors import InvalidRequest
from app.generation.grammars import InvalidSchema, text_format_grammar
from app.generation.prompt import ChatMessage, Turn, build_context
from app.generation.tool_calls import FunctionSpec, template_tool
from app.generation.types import ContextTooLong, PromptRenderer, SamplingParams
from app.ids import new_id
from app.model_registry.spec import ModelSpec
from app.observability import tracing
from app.queue.base import GenerationJob
from app.runtime import Runtime
from app.schemas.requests import ENCRYPTED_REASONING_INCLUDE, CreateResponseRequest
from app.schemas.responses import ConversationRef, ResponseObject, ResponseParams, default_text
from app.services import compaction
from app.services.compaction_items import compaction_item, open_compactions, open_history
from app.services.context import (
    ConnectionChain,
    ConversationTurn,
    check_call_outputs,
    load_conversation,
    load_history,
)
from app.services.input_normalization import normalize_input
from app.services.item_references import resolve_references
from app.services.models import renderer_for
from app.services.tools import ToolSetup, echoed_tools, resolve_tools
from app.services.validation import resolve_model

DEFAULT_TOP_P = 1.0
#: A prompt rendered from this many characters or more is heavy (about a second of CPU per MB to render and
#: count): such renders run a few at a time (Runtime.heavy_renders).
HEAVY_PROMPT_CHARS = 64 * 1024


def _params_of(request: CreateResponseRequest, settings: Settings, model: ModelSpec) -> ResponseParams:
    """The request's parameters, with the model's defaults (else the deployment's) where it gives none."""
    temperature = model.temperature if model.temperature is not None else settings.default_temperature
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
        reasoning=request.reasoning.model_dump(exclude_none=True) if request.reasoning else None,
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
    )


def _text_of(request: CreateResponseRequest) -> dict[str, Any]:
    text = default_text()
    if request.text is not None:
        text.update(request.text.model_dump(exclude_none=True, by_alias=True))
    return text


def conversation_id_of(request: CreateResponseRequest) -> str:
    conversation = request.conversation
    assert conversation is not None
    return conversation if isinstance(conversation, str) else conversation.id


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


@dataclass(frozen=True, slots=True)
class RenderedContext:
    """A request's context as the model reads it, and what it was built from."""

    #: The served model the request resolved to, and its renderer (its vocabulary and chat template).
    model: ModelSpec
    renderer: PromptRenderer
    prompt: list[int]
    #: The request's own input items, normalised (each with an id, references resolved).
    items: list[dict[str, Any]]
    tools: ToolSetup
    #: The earlier turns (of its chain or its conversation), oldest first, and the chain's first response.
    history: list[Turn]
    chain_root: str | None
    #: The conversation it runs on, as read: submission claims it (or finds it changed).
    conversation: ConversationTurn | None
    reasoning_tags: tuple[str, str] | None
    #: Jobs with the same key likely share a prompt prefix (prompt_cache_key, chain, conversation).
    affinity_key: str | None
    #: Output items that lead the response: the compaction item of an automatic compaction.
    leading: list[dict[str, Any]] = field(default_factory=list)


class PreparedResponse:
    """A validated create request: its Response (status queued), its input items and its job."""

    def __init__(
        self,
        response: ResponseObject,
        job: GenerationJob,
        stream: bool,
        context: RenderedContext,
        created: datetime,
    ) -> None:
        self.response = response
        #: When it was created, to the microsecond (the Response says the second): lists order by it.
        self.created = created
        self.job = job
        self.stream = stream
        self.context = context
        self.items = context.items
        #: Hosted tool types the request sent that cannot run here (named in a response header).
        self.ignored_tools = context.tools.ignored
        self.conversation = context.conversation


class _Context:
    """What the model reads before generating: its history, this request's items, and where they came from."""

    def __init__(self) -> None:
        self.history: list[Turn] = []
        self.chain_root: str | None = None
        self.conversation: ConversationTurn | None = None

    async def load(
        self, runtime: Runtime, request: CreateResponseRequest, tenant: str, connection: ConnectionChain | None
    ) -> None:
        """`connection`: a WebSocket connection's unstored last response, which `previous_response_id` may name."""
        if connection is not None and request.previous_response_id == connection.response_id:
            if request.store is not False:
                raise InvalidRequest(
                    f"Previous response '{connection.response_id}' was not stored; a response that continues it "
                    "must be created with store: false too.",
                    param="store",
                    code="invalid_value",
                )
            self.history, self.chain_root = list(connection.turns), connection.chain_root
            return
        if request.previous_response_id is None and request.conversation is None:
            return  # the stateless path touches no database
        async with runtime.sessionmaker() as session:
            if request.previous_response_id is not None:
                self.history, self.chain_root = await load_history(session, request.previous_response_id, tenant)
            else:
                self.history, self.conversation = await load_conversation(session, conversation_id_of(request), tenant)

    def readable(self, runtime: Runtime, tenant: str, items: list[dict[str, Any]]) -> tuple[list[Turn], list[Any]]:
        """History and items as the model reads them: compaction items opened (a 400 when one does not)."""
        where = "conversation" if self.conversation is not None else "previous_response_id"
        history = open_history(runtime.sealer, tenant, self.history, where)
        return history, open_compactions(
            runtime.sealer, tenant, items, lambda index: f"input[{index}].encrypted_content"
        )


def _check_combination(request: CreateResponseRequest) -> None:
    if request.background and request.store is False:
        raise InvalidRequest("background requires store to be true.", param="background", code="invalid_value")
    if request.conversation is not None and request.previous_response_id is not None:
        raise InvalidRequest(
            "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or "
            "'conversation'.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )


def _check_prompt_size(system: ChatMessage | None, conversation: list[ChatMessage], settings: Settings) -> None:
    """A bound on the work of rendering (and truncating) a prompt: its history grows with every turn of a chain
    or a conversation, past what one request body may carry."""
    chars = sum(len(message.content) for message in conversation) + (len(system.content) if system else 0)
    if chars > settings.max_prompt_chars:
        raise InvalidRequest(
            f"The context (instructions, history and input) is {chars} characters; this server renders prompts of "
            f"at most {settings.max_prompt_chars}. Start a new conversation or compact this one.",
            param="input",
            code="context_length_exceeded",
        )


async def _render(
    runtime: Runtime,
    renderer: PromptRenderer,
    system: ChatMessage | None,
    messages: list[ChatMessage],
    *,
    truncate: bool,
    template_options: dict[str, Any] | None,
) -> list[int]:
    chars = sum(len(message.content) for message in messages) + (len(system.content) if system else 0)
    # Big prompts take turns: left to themselves, six of them held every thread of the pool that an ordinary
    # request's render waits for.
    turns = runtime.heavy_renders if chars >= HEAVY_PROMPT_CHARS else contextlib.nullcontext()
    with tracing.span("render prompt", {"llama_responses.prompt_chars": chars}):
        async with turns:
            return await asyncio.to_thread(
                renderer.render_within_context,
                system,
                messages,
                truncate=truncate,
                template_options=template_options,
            )


async def _prompt_of(
    runtime: Runtime,
    request: CreateResponseRequest,
    tenant: str,
    system: ChatMessage | None,
    conversation: list[ChatMessage],
    *,
    compacted: Callable[[dict[str, Any]], tuple[ChatMessage | None, list[ChatMessage]]],
    template_options: dict[str, Any] | None,
    model: ModelSpec,
    renderer: PromptRenderer,
    affinity_key: str | None,
) -> tuple[list[int], list[dict[str, Any]]]:
    """The prompt tokens, and the output items that lead the response (a compaction item, when the context
    passed `context_management`'s threshold: the model summarised it first, and `compacted(summary)` is the
    context that the summary replaces it with)."""
    truncate = request.truncation == "auto"
    threshold = (
        compaction.compaction_threshold(request.context_management[0].compact_threshold, renderer.n_ctx)
        if request.context_management
        else None
    )
    prompt: list[int] | None = None
    try:
        prompt = await _render(
            runtime, renderer, system, conversation, truncate=truncate, template_options=template_options
        )
    except ContextTooLong as error:
        if threshold is None:
            raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    if prompt is not None and (threshold is None or len(prompt) <= threshold):
        return prompt, []
    summary = await compaction.summarize(
        runtime,
        system=system,
        messages=conversation,
        template_options=template_options,
        model=model,
        tenant=tenant,
        affinity_key=affinity_key,
    )
    item = compaction_item(runtime.sealer, tenant, summary.text, model=model.id)
    system, conversation = compacted(compaction.summary_as_read(item, summary.text))
    try:
        prompt = await _render(
            runtime, renderer, system, conversation, truncate=truncate, template_options=template_options
        )
    except ContextTooLong as error:
        raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    return prompt, [item]


async def render_context(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> RenderedContext:
    """Tools, input, history -> the prompt tokens (after an automatic compaction, when the request asks for one
    and the context passes its threshold). `connection`: see `_Context.load`."""
    model = resolve_model(request.model, runtime.models, runtime.settings)
    # A chain may switch models between turns: each turn is rendered with its own model's template.
    renderer = await renderer_for(runtime, model)
    # Off the event loop: a forced call converts every tool's schema to a grammar.
    tools = await asyncio.to_thread(
        resolve_tools, request.tools, request.tool_choice, strict=runtime.settings.strict_tools
    )
    items = normalize_input(request.input)
    await resolve_references(runtime, items, tenant, param="input")
    context = _Context()
    await context.load(runtime, request, tenant, connection)
    check_call_outputs(context.history, items)
    history, readable_items = context.readable(runtime, tenant, items)
    reasoning_tags = renderer.reasoning_tags
    # A template with tool support shows the tools its own way; otherwise the system prompt offers them.
    native_tools = renderer.supports_tools and bool(tools.functions)
    offered: list[FunctionSpec] = [] if native_tools else tools.functions

    def context_of(new_items: list[dict[str, Any]]) -> tuple[ChatMessage | None, list[ChatMessage]]:
        return build_context(
            instructions=request.instructions,
            history=history,
            new_items=new_items,
            functions=offered,
            reasoning_tags=reasoning_tags,
        )

    system, conversation = context_of(readable_items)
    _check_prompt_size(system, conversation, runtime.settings)
    # Templates read the variables they understand and ignore the others.
    template_options: dict[str, Any] = {}
    if request.reasoning and request.reasoning.effort:
        template_options["reasoning_effort"] = request.reasoning.effort
    if native_tools:
        template_options["tools"] = [template_tool(function) for function in tools.functions]
    if not conversation:
        raise InvalidRequest("The input must contain at least one message.", param="input", code="invalid_value")
    affinity_key = (
        request.prompt_cache_key
        or context.chain_root
        or (context.conversation.conversation_id if context.conversation else None)
    )
    prompt, leading = await _prompt_of(
        runtime,
        request,
        tenant,
        system,
        conversation,
        compacted=lambda summary_item: context_of([*readable_items, summary_item]),
        template_options=template_options or None,
        model=model,
        renderer=renderer,
        affinity_key=affinity_key,
    )
    return RenderedContext(
        model=model,
        renderer=renderer,
        prompt=prompt,
        items=items,
        tools=tools,
        history=context.history,
        chain_root=context.chain_root,
        conversation=context.conversation,
        reasoning_tags=reasoning_tags,
        affinity_key=affinity_key,
        leading=leading,
    )


async def prepare_response(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> PreparedResponse:
    """Everything that can fail with a 400 happens here, before anything is stored or generated."""
    _check_combination(request)
    context = await render_context(request, tenant, runtime, connection=connection)
    tools = context.tools
    params = _params_of(request, runtime.settings, context.model)
    grammar = await _output_grammar(context.renderer, tools, params.text.get("format"))
    created = utc_now()
    response = ResponseObject(
        **params.model_dump(),
        id=new_id("resp"),
        created_at=int(created.timestamp()),
        status="queued",
        model=context.model.id,
        previous_response_id=request.previous_response_id,
    )
    job = GenerationJob(
        response_id=response.id,
        prompt_tokens=context.prompt,
        sampling=SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_output_tokens=params.max_output_tokens,
            grammar=grammar,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            top_logprobs=params.top_logprobs if request.wants_logprobs else None,
        ),
        response=response.model_dump(mode="json"),
        store=params.store,
        keep_events=params.background and bool(request.stream),
        announced=params.background and bool(request.stream),
        tenant=tenant,
        model=context.model.id,
        functions={function.name: function.namespace for function in tools.functions},
        custom_tools=[function.name for function in tools.functions if function.kind == "custom"],
        reasoning_tags=context.reasoning_tags,
        encrypted_reasoning=ENCRYPTED_REASONING_INCLUDE in (request.include or []),
        parallel_tool_calls=params.parallel_tool_calls,
        affinity_key=context.affinity_key or response.id,
        conversation_id=context.conversation.conversation_id if context.conversation else None,
        conversation_input=context.items if context.conversation else [],
        leading_items=context.leading,
    )
    return PreparedResponse(response, job, stream=bool(request.stream), context=context, created=created)
