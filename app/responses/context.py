"""What the model reads for a create: the served model and its renderer, the tools it is offered, the request's
own items, the history before them (a chain's turns, a conversation's items, or a WebSocket connection's
unstored last response), all rendered into prompt tokens within the context window. A context past the
`context_management` threshold renders to nothing here: service.py compacts it first (compaction.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.conversations.turns import ConversationTurn, load_conversation
from app.errors import InvalidRequest, ServiceUnavailable
from app.events.terminal import TERMINAL_STATUSES
from app.generation import prompt
from app.generation.chat.template import TemplateRenderError, conversation_case, reasoning_variables
from app.generation.prompt import ChatMessage, Turn
from app.generation.registry import ModelRegistry, ModelSpec
from app.generation.tool_calls import FunctionSpec, template_tool
from app.generation.types import ContextTooLong, ModelLoadError, PromptRenderer
from app.hosted_tools.setup import HostedRequest, check_stores, parse_hosted
from app.items.compaction import open_compactions, open_history
from app.items.context_effects import configured_effort, withheld_reasoning
from app.items.normalization import check_call_outputs, normalize_input
from app.items.references import resolve_references
from app.mcp.approvals import approved_calls
from app.observability import tracing
from app.prompt_cache.diagnosis import Fingerprint
from app.responses import repository
from app.responses.mcp_tools import McpContext, gather_mcp, parse_servers
from app.responses.schemas import CreateResponseRequest
from app.responses.tools import ToolSetup, resolve_tools, searched_tools
from app.runtime import Runtime
from app.schemas.responses import InputTransformation
from app.schemas.tools import FILE_SEARCH, WEB_SEARCH_TYPES

#: A prompt rendered from this many characters or more is heavy (about a second of CPU per MB to render and
#: count): such renders run a few at a time (Runtime.heavy_renders).
HEAVY_PROMPT_CHARS = 64 * 1024
#: A context of this many items or more becomes chat messages on a worker thread: 10,000 items took 0.2-0.4 s of
#: the event loop (issue 27), which every other request on the API node waited for.
HEAVY_CONTEXT_ITEMS = 1000
#: Without a compact_threshold, a create compacts once its context passes this share of the window.
DEFAULT_THRESHOLD_SHARE = 0.8


def resolve_model(requested: str | None, registry: ModelRegistry, settings: Settings) -> ModelSpec:
    """The served model a request names (by id or alias); none named: the default one."""
    if requested is None:
        return registry.default
    spec = registry.get(requested)
    if spec is not None:
        return spec
    if settings.map_unknown_models:
        return registry.default
    # The hosted Responses API's answer to an unknown model (a 400, where GET /v1/models/{id} is a 404).
    raise InvalidRequest(f"The requested model '{requested}' does not exist.", param="model", code="model_not_found")


async def renderer_for(runtime: Runtime, spec: ModelSpec) -> PromptRenderer:
    """The model's renderer; a model whose vocabulary cannot be loaded fails this request only (a 503)."""
    try:
        return await runtime.renderers.get(spec)
    except ModelLoadError as error:
        raise ServiceUnavailable(str(error), param="model", code="model_unavailable") from None


def conversation_id_of(request: CreateResponseRequest) -> str:
    conversation = request.conversation
    assert conversation is not None
    return conversation if isinstance(conversation, str) else conversation.id


@dataclass(frozen=True, slots=True)
class ConnectionChain:
    """A WebSocket connection's last response when it was not stored (store: false), kept in that connection's
    memory only: its whole context (earlier turns, then its own input and output) for a continuation to read."""

    response_id: str
    turns: Sequence[Turn]
    chain_root: str
    #: What a later response's prompt_cache_diagnostics compare against (app/prompt_cache/diagnosis.py).
    fingerprint: Fingerprint | None = None


async def load_history(session: AsyncSession, previous_id: str, tenant: str) -> tuple[list[Turn], str]:
    """The chain's turns, oldest first, and the id of its first response."""
    chain = await repository.get_chain(session, previous_id, tenant)
    if not chain:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if chain[-1].status not in TERMINAL_STATUSES:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' is still {chain[-1].status}; "
            "chain onto it once it has finished.",
            param="previous_response_id",
            code="previous_response_not_finished",
        )
    items = await repository.get_input_items(session, [row.id for row in chain])
    return [Turn(input_items=items[row.id], output_items=row.output) for row in chain], chain[0].id


@dataclass(frozen=True, slots=True)
class _History:
    """The earlier turns a request continues (of its chain or its conversation), oldest first."""

    turns: list[Turn] = field(default_factory=list)
    #: The chain's first response.
    chain_root: str | None = None
    #: The conversation it runs on, as read: submission claims it (or finds it changed).
    conversation: ConversationTurn | None = None


async def _load_history(
    runtime: Runtime, request: CreateResponseRequest, tenant: str, connection: ConnectionChain | None
) -> _History:
    """`connection`: a WebSocket connection's unstored last response, which `previous_response_id` may name."""
    if connection is not None and request.previous_response_id == connection.response_id:
        if request.store is not False:
            raise InvalidRequest(
                f"Previous response '{connection.response_id}' was not stored; a response that continues it "
                "must be created with store: false too.",
                param="store",
                code="invalid_value",
            )
        return _History(list(connection.turns), connection.chain_root)
    if request.previous_response_id is None and request.conversation is None:
        return _History()  # the stateless path touches no database
    async with runtime.database.read() as session:
        if request.previous_response_id is not None:
            turns, chain_root = await load_history(session, request.previous_response_id, tenant)
            return _History(turns, chain_root)
        turns, conversation = await load_conversation(session, conversation_id_of(request), tenant)
        return _History(turns, conversation=conversation)


def _check_prompt_size(system: ChatMessage | None, conversation: list[ChatMessage], settings: Settings) -> None:
    """A bound on the work of rendering (and truncating) a prompt: its history grows with every turn of a chain
    or a conversation, past what one request body may carry."""
    chars = sum(len(message.text) for message in conversation) + (len(system.text) if system else 0)
    if chars > settings.max_prompt_chars:
        raise InvalidRequest(
            f"The context (instructions, history and input) is {chars} characters; this server renders prompts of "
            f"at most {settings.max_prompt_chars}. Start a new conversation or compact this one.",
            param="input",
            code="context_length_exceeded",
        )


@dataclass(frozen=True, slots=True)
class Context:
    """A create's context, checked, as the model will read it: everything but the rendering."""

    #: The served model the request resolved to, and its renderer (its vocabulary and chat template).
    model: ModelSpec
    renderer: PromptRenderer
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
    instructions: str | None
    #: The history and items as the model reads them (compaction items opened).
    readable_history: list[Turn]
    readable_items: list[dict[str, Any]]
    #: Functions the system prompt offers (none when the chat template shows the tools itself).
    offered: list[FunctionSpec]
    template_options: dict[str, Any] | None
    truncate: bool
    #: Past this many prompt tokens the context is compacted first (context_management); None: never.
    compact_threshold: int | None
    #: The request's MCP servers, their listings and the tools they offer (None: no mcp tool).
    mcp: McpContext | None = None
    #: The request's hosted tools this server runs (file_search, web_search), offered beside the MCP tools.
    hosted: HostedRequest = field(default_factory=HostedRequest)
    #: Its input ended with a compaction_trigger: compact first, whatever the size.
    compaction_trigger: bool = False
    #: The reasoning effort a configuration_update of the context sets where the request sets none (None: none).
    configured_effort: str | None = None
    #: The reasoning items of the context the model does not read, and why (the Response's input_transformations).
    input_transformations: list[InputTransformation] = field(default_factory=list)

    @property
    def heavy(self) -> bool:
        """Whether building its messages is work to take off the event loop."""
        items = sum(len(turn.input_items) + len(turn.output_items) for turn in self.readable_history)
        return items + len(self.readable_items) >= HEAVY_CONTEXT_ITEMS

    async def messages_off_loop(
        self, extra_items: Sequence[dict[str, Any]] = ()
    ) -> tuple[ChatMessage | None, list[ChatMessage]]:
        """messages(), on a worker thread when the context is heavy."""
        if self.heavy:
            return await asyncio.to_thread(self.messages, extra_items)
        return self.messages(extra_items)

    def messages(self, extra_items: Sequence[dict[str, Any]] = ()) -> tuple[ChatMessage | None, list[ChatMessage]]:
        """The system message and the conversation, with `extra_items` after the request's own (a summary)."""
        return prompt.build_context(
            instructions=self.instructions,
            history=self.readable_history,
            new_items=[*self.readable_items, *extra_items],
            functions=self.offered,
            reasoning_tags=self.reasoning_tags,
            structured=self.renderer.structured,
        )


async def gather_context(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> Context:
    """Model, tools, input and history, checked (a 400 for whatever is wrong). `connection`: see _load_history."""
    model = resolve_model(request.model, runtime.models, runtime.settings)
    # A chain may switch models between turns: each turn is rendered with its own model's template.
    renderer = await renderer_for(runtime, model)
    servers = parse_servers(request.tools, tenant, runtime)
    hosted = parse_hosted(request.tools, request.include, runtime.settings)
    await check_stores(hosted, runtime.database, tenant)
    choice_type = request.tool_choice.get("type") if isinstance(request.tool_choice, dict) else None
    mcp_choice = choice_type == "mcp" or choice_type == FILE_SEARCH or choice_type in WEB_SEARCH_TYPES
    # Checked first without the MCP servers' tools (not listed yet): a choice that needs them waits for them.
    waits = mcp_choice or (bool(servers or hosted.offered) and request.tool_choice == "required")
    # Off the event loop: a forced call converts every tool's schema to a grammar.
    tools = await asyncio.to_thread(
        resolve_tools,
        request.tools,
        None if waits else request.tool_choice,
        strict=runtime.settings.strict_tools,
        dialect=renderer.dialect,
        hosted_types=hosted.types,
    )
    items = normalize_input(request.input, trigger=True)
    # The trigger is no item of the context: the compaction item it leads to is what a response keeps of it.
    trigger = bool(items) and items[-1]["type"] == "compaction_trigger"
    if trigger:
        items.pop()
    await resolve_references(runtime.database, items, tenant, param="input")
    history = await _load_history(runtime, request, tenant, connection)
    check_call_outputs(history.turns, items)
    # A conversation's approvals added with its items API are this response's to make (a chain's never wait).
    approved = approved_calls(
        [item for turn in history.turns for item in (*turn.input_items, *turn.output_items)],
        items,
        pending_earlier="conversation" if history.conversation is not None else None,
    )
    # The request's own items count as history for the listings: a stateless client resends them.
    listed = [*history.turns, Turn(input_items=items, output_items=())]
    mcp = await gather_mcp(servers, tenant, runtime, listed) if servers else None
    if approved:
        (mcp or McpContext()).take_approved(approved)
    found = searched_tools([item for turn in listed for item in (*turn.input_items, *turn.output_items)], request.tools)
    if hosted.offered and mcp is None:
        mcp = McpContext()  # the tool loop runs the hosted tools' calls as it runs MCP ones
    if mcp is not None or mcp_choice or found:
        # Again, with the MCP servers' tools and the hosted tools offered beside the functions (and tool_choice
        # naming one of them), and the tools the client's tool searches found after them (NOTE: a 400 names those
        # past the request's).
        offered = [*(mcp.offered if mcp is not None else []), *hosted.offered]
        tools = await asyncio.to_thread(
            resolve_tools,
            [*(request.tools or []), *found],
            request.tool_choice,
            strict=runtime.settings.strict_tools,
            dialect=renderer.dialect,
            mcp=offered,
            hosted_types=hosted.types,
        )
    where = "conversation" if history.conversation is not None else "previous_response_id"
    readable_history = open_history(runtime.sealer, tenant, history.turns, where)
    readable_items = open_compactions(runtime.sealer, tenant, items, lambda index: f"input[{index}].encrypted_content")
    # A template with tool support shows the tools its own way; otherwise the system prompt offers them.
    native_tools = renderer.supports_tools and bool(tools.functions)
    # Templates read the variables they understand and ignore the others. The request's own effort first; else
    # the one the newest configuration_update of the context set.
    effort = request.reasoning.effort if request.reasoning else None
    applied = configured_effort(history.turns, items) if effort is None else None
    template_options: dict[str, Any] = reasoning_variables(effort or applied)
    if native_tools:
        template_options["tools"] = [template_tool(function) for function in tools.functions]
    threshold = None
    if request.context_management:
        share = int(renderer.n_ctx * DEFAULT_THRESHOLD_SHARE)
        threshold = request.context_management[0].compact_threshold or share
    context = Context(
        model=model,
        renderer=renderer,
        items=items,
        tools=tools,
        history=history.turns,
        chain_root=history.chain_root,
        conversation=history.conversation,
        reasoning_tags=renderer.reasoning_tags,
        affinity_key=request.prompt_cache_key
        or history.chain_root
        or (history.conversation.conversation_id if history.conversation else None),
        instructions=request.instructions,
        readable_history=readable_history,
        readable_items=readable_items,
        offered=[] if native_tools else tools.functions,
        template_options=template_options or None,
        truncate=request.truncation == "auto",
        compact_threshold=threshold,
        mcp=mcp,
        hosted=hosted,
        compaction_trigger=trigger,
        configured_effort=applied,
        input_transformations=withheld_reasoning(readable_history, readable_items, renderer.reasoning_tags),
    )
    system, conversation = await context.messages_off_loop()
    _check_prompt_size(system, conversation, runtime.settings)
    if not conversation:
        raise InvalidRequest("The input must contain at least one message.", param="input", code="invalid_value")
    return context


def template_refusal(
    model: str, error: TemplateRenderError, system: ChatMessage | None, messages: list[ChatMessage]
) -> InvalidRequest:
    """The 400 for a conversation the model's chat template cannot render: the model, what the conversation
    holds, and the template's own words."""
    case = conversation_case([message.as_template_dict() for message in ([system] if system else []) + messages])
    return InvalidRequest(
        f"The chat template of model '{model}' cannot render this conversation ({case}): {error}",
        param="input",
        code="unsupported_conversation",
    )


async def render_messages(
    runtime: Runtime, context: Context, system: ChatMessage | None, messages: list[ChatMessage]
) -> list[int]:
    """Prompt tokens within the context window (truncated when the request allows), rendered off the event loop;
    ContextTooLong when they cannot fit, a 400 when the model's template refuses them."""
    chars = sum(len(message.text) for message in messages) + (len(system.text) if system else 0)
    # Big prompts take turns: left to themselves, six of them held every thread of the pool that an ordinary
    # request's render waits for.
    turns = runtime.heavy_renders if chars >= HEAVY_PROMPT_CHARS else contextlib.nullcontext()
    with tracing.span("render prompt", {"llama_responses.prompt_chars": chars}):
        async with turns:
            try:
                return await asyncio.to_thread(
                    context.renderer.render_within_context,
                    system,
                    messages,
                    truncate=context.truncate,
                    template_options=context.template_options,
                )
            except TemplateRenderError as error:
                raise template_refusal(context.model.id, error, system, messages) from None


async def render_prompt(runtime: Runtime, context: Context) -> list[int] | None:
    """The prompt tokens; None when the context must be compacted first (its input ended with a
    compaction_trigger, it passes the request's `context_management` threshold, or it does not fit at all while
    compaction was asked for)."""
    if context.compaction_trigger:
        return None
    try:
        tokens = await render_messages(runtime, context, *await context.messages_off_loop())
    except ContextTooLong as error:
        if context.compact_threshold is None:
            raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
        return None
    if context.compact_threshold is not None and len(tokens) > context.compact_threshold:
        return None
    return tokens
