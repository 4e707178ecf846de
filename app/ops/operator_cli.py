"""`llama-responses responses list|show|delete` and `llama-responses prune`: an operator's look at the store,
straight against the database through the same services (and tenant scoping) as the API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar, get_args

from app.config import Settings
from app.db.migrations import SchemaOutOfDate, run_with_database
from app.db.session import Database
from app.errors import ApiError
from app.keys.service import tenant_of_api_key, tenant_of_project_name
from app.ops.retention import apply_retention
from app.responses.reads import delete_response, list_responses, read_response
from app.responses.schemas import ResponseFilters
from app.schemas.paging import MAX_PAGE_LIMIT, page_request
from app.schemas.responses import ResponseStatus
from app.tenants.identity import OPEN_TENANT

T = TypeVar("T")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    responses = commands.add_parser("responses", help="list, show or delete stored responses")
    actions = responses.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="a tenant's stored responses, newest first")
    listing.add_argument("--status", choices=get_args(ResponseStatus), help="only responses with this status")
    listing.add_argument("--model", help="only responses of this model")
    listing.add_argument("--limit", type=int, default=20, help=f"how many (1 to {MAX_PAGE_LIMIT})")
    listing.add_argument("--after", help="the page after this response id")
    listing.add_argument("--json", action="store_true", help="print the page as the API returns it")
    show = actions.add_parser("show", help="one response as JSON, as GET /v1/responses/{id} returns it")
    show.add_argument("response_id")
    delete = actions.add_parser("delete", help="delete a finished response")
    delete.add_argument("response_id")
    for action in (listing, show, delete):
        owner = action.add_mutually_exclusive_group()
        owner.add_argument(
            "--tenant", default=OPEN_TENANT, help=f"whose responses: a tenant id as stored (default {OPEN_TENANT!r})"
        )
        owner.add_argument("--api-key", help="whose responses: the tenant of this API key (its project's, if kept)")
        owner.add_argument("--project", help="whose responses: this project's (every key of it shares them)")
    responses.set_defaults(run=_responses)
    prune = commands.add_parser(
        "prune", help="apply every retention rule now (responses, events, batches, batch files, webhook deliveries)"
    )
    prune.set_defaults(run=_prune)


async def _tenant(database: Database, args: argparse.Namespace) -> str:
    if args.api_key:
        return await tenant_of_api_key(database, args.api_key)
    if args.project:
        return await tenant_of_project_name(database, args.project)
    return str(args.tenant)


def _with_database(work: Callable[[Database], Awaitable[T]], settings: Settings | None = None) -> T:
    return run_with_database(work, settings or Settings())


def _as_tenant(
    args: argparse.Namespace, work: Callable[[Database, str], Awaitable[T]]
) -> Callable[[Database], Awaitable[T]]:
    """`work` for the tenant that the arguments name."""

    async def run(database: Database) -> T:
        return await work(database, await _tenant(database, args))

    return run


def _when(unix_s: int) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _responses(args: argparse.Namespace) -> int:
    try:
        if args.action == "list":
            request = page_request(args.limit, "desc", args.after)
            filters = ResponseFilters(status=args.status, model=args.model)
            page = _with_database(
                _as_tenant(args, lambda database, tenant: list_responses(database, tenant, filters, request))
            )
            if args.json:
                print(page.model_dump_json(indent=2))
                return 0
            for response in page.data:
                tokens = response.usage.total_tokens if response.usage else "-"
                print(f"{response.id}  {_when(response.created_at)}  {response.status:<11} {response.model}  {tokens}")
            if page.has_more:
                print(f"(more: --after {page.last_id})")
        elif args.action == "show":
            response = _with_database(
                _as_tenant(args, lambda database, tenant: read_response(database, args.response_id, tenant))
            )
            print(response.model_dump_json(indent=2))
        else:
            # No queue here to stop a generation through: a response still running is refused.
            _with_database(
                _as_tenant(
                    args,
                    lambda database, tenant: delete_response(database, args.response_id, tenant, stop_running=None),
                )
            )
            print(f"deleted {args.response_id}")
    except (ApiError, SchemaOutOfDate) as error:
        print(f"llama-responses: {error}", file=sys.stderr)
        return 1
    return 0


def _prune(_: argparse.Namespace) -> int:
    settings = Settings()
    try:
        report = _with_database(lambda database: apply_retention(database, settings), settings)
    except SchemaOutOfDate as error:
        print(f"llama-responses: {error}", file=sys.stderr)
        return 1
    print(
        f"purged {report.purged_responses} responses older than {settings.retention_days:g} days; "
        f"dropped the stream events of {report.pruned_event_streams} responses finished over "
        f"{settings.events_retention_hours:g} hours ago; purged {report.purged_batches} ended batches and "
        f"{report.purged_webhook_deliveries} finished webhook deliveries older than {settings.retention_days:g} "
        f"days, and {report.purged_batch_files} batch output files older than "
        f"{settings.batch_output_retention_days:g} days; dropped {report.pruned_usage_days} usage rows older than "
        f"{settings.usage_retention_days} days; forgot {report.purged_idempotency_keys} Idempotency-Keys past their "
        f"{settings.idempotency_window_hours:g}-hour window"
    )
    return 0
