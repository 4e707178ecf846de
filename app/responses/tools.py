"""A request's tools and tool_choice -> what the model is offered, what it must do, and what is left out."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from app.errors import InvalidRequest, validation_error
from app.generation.dialects.families import CONVENTION, dialect_named
from app.generation.grammars import InvalidSchema, function_grammar
from app.generation.tool_calls import (
    CLIENT_TOOL_DESCRIPTIONS,
    CLIENT_TOOL_PARAMETERS,
    TOOL_SEARCH_PARAMETERS,
    FunctionSpec,
    ToolKind,
)
from app.mcp.servers import redacted
from app.schemas.tools import (
    CLIENT_TOOL_TYPES,
    FILE_SEARCH,
    FILE_SEARCH_DEFAULT_MAX_RESULTS,
    HOSTED_TOOL_TYPES,
    WEB_SEARCH,
    WEB_SEARCH_TYPES,
    CustomTool,
    FunctionChoice,
    FunctionTool,
    McpChoice,
    NamespaceTool,
    hosted_label,
)

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolSetup:
    #: Functions offered to the model (none when tool_choice is "none").
    functions: list[FunctionSpec] = field(default_factory=list)
    #: Hosted tool types that were sent but cannot run here, and so were left out.
    ignored: list[str] = field(default_factory=list)
    #: A grammar forcing one call (tool_choice "required" or a named function); None lets the model choose.
    grammar: str | None = None
    #: Offered functions that are MCP servers' tools: name -> server_label.
    mcp_tools: dict[str, str] = field(default_factory=dict)


def _echoed_function(tool: dict[str, Any]) -> dict[str, Any]:
    # NOTE: `strict` defaults to false here (the hosted API defaults to true): arguments are held to the schema
    # by a grammar only when a call is forced (tool_choice "required" or a named function).
    return {"description": None, "parameters": None, **tool, "strict": bool(tool.get("strict"))}


def _echoed_file_search(tool: dict[str, Any]) -> dict[str, Any]:
    # The options it searches with when the create left them out: the SDK's FileSearchTool declares them, and Open
    # Responses' FileSearchTool requires max_num_results, ranking_options (ranker, score_threshold) and filters.
    ranking = tool.get("ranking_options")
    if ranking is None or isinstance(ranking, dict):
        ranking = {"ranker": "auto", "score_threshold": 0.0, **(ranking or {})}
    return {"max_num_results": FILE_SEARCH_DEFAULT_MAX_RESULTS, "filters": None, **tool, "ranking_options": ranking}


def echoed_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as a Response echoes them: function tools with every field the SDK declares, strict a boolean;
    file_search with the options it searches with."""
    echoed: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") == "function":
            tool = _echoed_function(tool)
        elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            members = [
                _echoed_function(member) if isinstance(member, dict) and member.get("type") == "function" else member
                for member in tool["tools"]
            ]
            tool = {**tool, "tools": members}
        elif tool.get("type") == "mcp":
            tool = redacted(tool)
        elif tool.get("type") == FILE_SEARCH:
            tool = _echoed_file_search(tool)
        echoed.append(tool)
    return echoed


def _function(tool: dict[str, Any], param: str, namespace: str | None = None) -> FunctionSpec:
    try:
        parsed = FunctionTool.model_validate(tool)
    except ValidationError as error:
        raise _with_prefix(error, param) from None
    parameters = parsed.parameters or EMPTY_PARAMETERS
    try:
        Draft202012Validator.check_schema(parameters)
    except (SchemaError, RecursionError) as error:
        problem = error.message if isinstance(error, SchemaError) else "it is nested too deeply"
        raise InvalidRequest(
            f"Invalid JSON Schema for function '{parsed.name}': {problem}",
            param=f"{param}.parameters",
            code="invalid_function_parameters",
        ) from None
    return FunctionSpec(parsed.name, parsed.description, parameters, namespace)


def _custom(tool: dict[str, Any], param: str, namespace: str | None = None) -> FunctionSpec:
    try:
        parsed = CustomTool.model_validate(tool)
    except ValidationError as error:
        raise _with_prefix(error, param) from None
    pattern = None
    if parsed.format is not None and parsed.format.type == "grammar":
        if not parsed.format.definition:
            raise InvalidRequest(
                "A grammar format needs a 'definition'.", param=f"{param}.format.definition", code="invalid_value"
            )
        # NOTE: a regex becomes part of the call grammar when the call is forced; Lark grammars are shown to
        # the model but not enforced (llama.cpp has no Lark).
        if parsed.format.syntax == "regex":
            pattern = parsed.format.definition
    return FunctionSpec(parsed.name, parsed.description, {}, namespace, kind="custom", input_pattern=pattern)


def _tool_type(tool: dict[str, Any], param: str) -> FunctionSpec | None:
    """A client-executed tool type as a function named after its type with its fixed arguments; None when this
    one runs on OpenAI's side (a shell in a hosted container, a tool_search the server runs)."""
    kind = str(tool["type"])
    if kind == "shell":
        environment = tool.get("environment")
        if isinstance(environment, dict) and environment.get("type") not in (None, "local"):
            return None  # container_auto / container_reference: OpenAI's containers
    if kind == "tool_search":
        if tool.get("execution") != "client":
            return None
        parameters = tool.get("parameters") or TOOL_SEARCH_PARAMETERS
        if not isinstance(parameters, dict):
            raise InvalidRequest("'parameters' must be a JSON Schema object.", param=f"{param}.parameters")
        try:
            Draft202012Validator.check_schema(parameters)
        except (SchemaError, RecursionError):
            raise InvalidRequest(
                "Invalid JSON Schema for tool_search.", param=f"{param}.parameters", code="invalid_function_parameters"
            ) from None
        description = tool.get("description")
        text = description if isinstance(description, str) and description else CLIENT_TOOL_DESCRIPTIONS[kind]
        return FunctionSpec(kind, text, parameters, kind="tool_search")
    return FunctionSpec(kind, CLIENT_TOOL_DESCRIPTIONS[kind], CLIENT_TOOL_PARAMETERS[kind], kind=cast(ToolKind, kind))


def _with_prefix(error: ValidationError, param: str) -> InvalidRequest:
    problem = validation_error(list(error.errors()))
    problem.param = f"{param}.{problem.param}" if problem.param else param
    return problem


def _functions_of(
    tools: list[dict[str, Any]],
    *,
    strict: bool,
    mcp: Sequence[tuple[str, FunctionSpec]] = (),
    hosted_types: Collection[str] = (),
) -> tuple[list[FunctionSpec], list[str], dict[str, str]]:
    """The functions offered, the hosted tool types left out, and where each function's schema was sent (its
    `parameters`, or its custom format's `definition`), to name it in a 400."""
    functions: list[FunctionSpec] = []
    ignored: list[str] = []
    schema_params: dict[str, str] = {}
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        kind = tool.get("type")
        if kind == "function":
            functions.append(_function(tool, param))
            schema_params[functions[-1].name] = f"{param}.parameters"
        elif kind == "namespace":
            try:
                namespace = NamespaceTool.model_validate(tool)
            except ValidationError as error:
                raise _with_prefix(error, param) from None
            for position, member in enumerate(namespace.tools):
                where = f"{param}.tools[{position}]"
                if isinstance(member, CustomTool):
                    functions.append(_custom(member.model_dump(), where, namespace.name))
                    schema_params[functions[-1].name] = f"{where}.format.definition"
                else:
                    functions.append(_function(member.model_dump(), where, namespace.name))
                    schema_params[functions[-1].name] = f"{where}.parameters"
        elif kind == "mcp" or (isinstance(kind, str) and kind in hosted_types):
            # An MCP server's tools (listed and offered by app/responses/mcp_tools.py), or a hosted tool this server
            # runs (app/hosted_tools/setup.py): offered among `mcp`.
            continue
        elif isinstance(kind, str) and kind in CLIENT_TOOL_TYPES and (typed := _tool_type(tool, param)) is not None:
            functions.append(typed)
            schema_params[typed.name] = f"{param}.parameters" if kind == "tool_search" else param
        elif isinstance(kind, str) and (kind in HOSTED_TOOL_TYPES or kind in CLIENT_TOOL_TYPES):
            if strict:
                raise InvalidRequest(
                    f"Tools of type '{kind}' run on OpenAI's servers and are not available here.",
                    param=f"{param}.type",
                    code="unsupported_tool_type",
                )
            ignored.append(str(kind))
        elif kind == "custom":
            functions.append(_custom(tool, param))
            schema_params[functions[-1].name] = f"{param}.format.definition"
        else:
            raise InvalidRequest(f"Unknown tool type '{kind}'.", param=f"{param}.type", code="invalid_value")
    for _label, function in mcp:
        functions.append(function)
        schema_params[function.name] = "tools"
    seen: set[str] = set()
    for function in functions:
        if function.name in seen:
            raise InvalidRequest(
                f"Duplicate tool name '{function.name}': function names must be unique.",
                param="tools",
                code="duplicate_tool_name",
            )
        seen.add(function.name)
    return functions, ignored, schema_params


def searched_tools(items: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The tools a client's tool searches found (its tool_search_output items among `items`), which the model may
    call from then on as if the request had sent them: each name once (the latest search's), none the request's
    `tools` name already."""
    sent = {tool.get("name") for tool in tools or [] if isinstance(tool, dict)}
    found: dict[str, dict[str, Any]] = {}
    for item in items:
        if item.get("type") == "tool_search_output" and item.get("execution") == "client":
            for tool in item.get("tools") or []:
                if isinstance(tool, dict) and tool.get("name") not in sent and isinstance(tool.get("name"), str):
                    found[tool["name"]] = tool
    return list(found.values())


def resolve_tools(
    tools: list[dict[str, Any]] | None,
    tool_choice: str | dict[str, Any] | None,
    *,
    strict: bool,
    mcp: Sequence[tuple[str, FunctionSpec]] = (),
    dialect: str = CONVENTION.name,
    hosted_types: Collection[str] = (),
) -> ToolSetup:
    """`mcp`: the MCP servers' tools offered, as (server_label, function), the hosted tools this server runs
    among them (under their `hosted:` labels; `hosted_types`: the tool types they came as); `dialect`: the model
    family whose syntax a forced call is written in (app/generation/dialects)."""
    functions, ignored, schema_params = _functions_of(tools or [], strict=strict, mcp=mcp, hosted_types=hosted_types)
    mcp_tools = {function.name: label for label, function in mcp}
    choice = tool_choice or "auto"
    if choice == "none":
        return ToolSetup(ignored=ignored)
    if choice == "auto":
        return ToolSetup(functions, ignored, mcp_tools=mcp_tools)
    if choice == "required":
        if not functions:
            raise InvalidRequest(
                "tool_choice 'required' needs at least one function tool.", param="tool_choice", code="invalid_value"
            )
        return ToolSetup(functions, ignored, _forced(functions, schema_params, dialect), mcp_tools)
    if isinstance(choice, dict) and choice.get("type") in ("shell", "apply_patch"):
        chosen = [function for function in functions if function.kind == choice["type"]]
        if not chosen:
            raise InvalidRequest(
                f"tool_choice names the '{choice['type']}' tool, which is not among the tools.",
                param="tool_choice.type",
                code="invalid_value",
            )
        return ToolSetup(functions, ignored, _forced(chosen, schema_params, dialect), mcp_tools)
    if isinstance(choice, dict) and choice.get("type") == "mcp":
        return ToolSetup(functions, ignored, _forced(_mcp_chosen(choice, mcp), schema_params, dialect), mcp_tools)
    if isinstance(choice, dict) and (choice.get("type") == FILE_SEARCH or choice.get("type") in WEB_SEARCH_TYPES):
        return ToolSetup(functions, ignored, _forced(_hosted_chosen(choice, mcp), schema_params, dialect), mcp_tools)
    if not isinstance(choice, dict) or choice.get("type") not in ("function", "custom"):
        kind = choice.get("type") if isinstance(choice, dict) else choice
        raise InvalidRequest(
            f"tool_choice of type '{kind}' is not supported by this server yet.",
            param="tool_choice",
            code="unsupported_parameter",
        )
    try:
        named = FunctionChoice.model_validate(choice)
    except ValidationError as error:
        raise _with_prefix(error, "tool_choice") from None
    chosen = [function for function in functions if function.name == named.name and function.kind == named.type]
    if not chosen:
        raise InvalidRequest(
            f"tool_choice names the function '{named.name}', which is not among the tools.",
            param="tool_choice.name",
            code="invalid_value",
        )
    return ToolSetup(functions, ignored, _forced(chosen, schema_params, dialect), mcp_tools)


def _hosted_chosen(choice: dict[str, Any], mcp: Sequence[tuple[str, FunctionSpec]]) -> list[FunctionSpec]:
    """tool_choice {type: "file_search"} (or a web_search type): a call of that hosted tool, which must be offered."""
    name = FILE_SEARCH if choice["type"] == FILE_SEARCH else WEB_SEARCH
    chosen = [function for label, function in mcp if label == hosted_label(name)]
    if not chosen:
        raise InvalidRequest(
            f"tool_choice names the '{choice['type']}' tool, which is not among the tools this server runs"
            + (" (its operator configured no web search backend)." if name == WEB_SEARCH else "."),
            param="tool_choice.type",
            code="invalid_value",
        )
    return chosen


def _mcp_chosen(choice: dict[str, Any], mcp: Sequence[tuple[str, FunctionSpec]]) -> list[FunctionSpec]:
    try:
        named = McpChoice.model_validate(choice)
    except ValidationError as error:
        raise _with_prefix(error, "tool_choice") from None
    of_server = [function for label, function in mcp if label == named.server_label]
    if not of_server:
        raise InvalidRequest(
            f"tool_choice names the MCP server '{named.server_label}', which offers no tools here.",
            param="tool_choice.server_label",
            code="invalid_value",
        )
    chosen = [function for function in of_server if named.name is None or function.name == named.name]
    if not chosen:
        raise InvalidRequest(
            f"tool_choice names the tool '{named.name}', which the MCP server '{named.server_label}' does not offer.",
            param="tool_choice.name",
            code="invalid_value",
        )
    return chosen


def _forced(functions: list[FunctionSpec], schema_params: dict[str, str], dialect: str) -> str:
    """The grammar forcing one call of `functions`, in `dialect`'s syntax: each checked alone first, so that a
    400 names its tool."""
    for function in functions:
        try:
            function_grammar(function)
        except InvalidSchema as error:
            raise InvalidRequest(
                f"The call of '{function.name}' cannot be enforced: {error}.",
                param=schema_params[function.name],
                code="invalid_function_parameters",
            ) from None
    try:
        return dialect_named(dialect).grammar(functions)
    except InvalidSchema as error:
        raise InvalidRequest(str(error), param="tools", code="invalid_function_parameters") from None
