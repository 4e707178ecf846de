"""`llama-responses projects list|limits`: the projects in the database and their own limits, straight against it
(the same service as /v1/projects/{id}/limits)."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from app.config import Settings
from app.db.migrations import SchemaOutOfDate, run_with_database
from app.db.session import Database
from app.errors import ApiError, InvalidRequest, validation_error
from app.keys import project_limits
from app.keys.schemas import LIMIT_NAMES, ProjectLimits, ProjectLimitsUpdate

#: Each limit's option (`--max-concurrent N`), by the field it sets.
OPTIONS = {
    "requests_per_min": "requests-per-min",
    "tokens_per_min": "tokens-per-min",
    "max_concurrent_requests": "max-concurrent",
    "max_queued_background": "max-queued-background",
    "max_stored_bytes": "max-stored-bytes",
}
#: What `--clear` takes: an option's name or the field's, each naming the field.
CLEARABLE = {**{option: field for field, option in OPTIONS.items()}, **{field: field for field in LIMIT_NAMES}}


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    projects = commands.add_parser("projects", help="list projects, or show and set a project's own limits")
    actions = projects.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the projects, oldest first, with the limits each sets")
    listing.add_argument("--json", action="store_true", help="print the list as the API returns it")
    limits = actions.add_parser(
        "limits",
        help="show a project's limits, setting those given first (each applies on every node within "
        "RESPONSES_KEY_CACHE_TTL_S)",
    )
    limits.add_argument("project", metavar="PROJECT", help="the project's id or name")
    for field, option in OPTIONS.items():
        limits.add_argument(f"--{option}", dest=field, type=int, metavar="N", help=f"this project's {field} (0: off)")
    limits.add_argument(
        "--clear",
        nargs="+",
        default=[],
        choices=sorted(CLEARABLE),
        metavar="NAME",
        help="back to the server's setting: " + ", ".join(OPTIONS.values()),
    )
    limits.add_argument("--json", action="store_true", help="print the limits as the API returns them")
    projects.set_defaults(run=_projects)


def _value(value: int | None) -> str:
    if value is None:
        return "-"
    return "off" if value == 0 else str(value)


def _show(limits: ProjectLimits) -> str:
    lines = [f"{limits.project_id}  {limits.project}"]
    for field in LIMIT_NAMES:
        override = getattr(limits.overrides, field)
        applied = getattr(limits.effective, field)
        source = "server's setting" if override is None else "project"
        lines.append(f"  {field:<24} {_value(applied):>12}  ({source})")
    return "\n".join(lines)


def _line(limits: ProjectLimits) -> str:
    overrides = "  ".join(f"{field}={_value(getattr(limits.overrides, field))}" for field in LIMIT_NAMES)
    return f"{limits.project_id}  {limits.project}  {overrides}"


def _update(args: argparse.Namespace) -> ProjectLimitsUpdate:
    """The options as an update (the API's checks), or a 400 naming what is wrong."""
    changes: dict[str, int | None] = {field: getattr(args, field) for field in LIMIT_NAMES}
    changes = {field: value for field, value in changes.items() if value is not None}
    for name in args.clear:
        field = CLEARABLE[name]
        if field in changes:
            raise InvalidRequest(f"--{OPTIONS[field]} and --clear {name} contradict each other.", param=field)
        changes[field] = None
    try:
        return ProjectLimitsUpdate.model_validate(changes)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


async def _set_limits(
    database: Database, settings: Settings, project: str, update: ProjectLimitsUpdate
) -> ProjectLimits:
    project_id = await project_limits.project_id_of(database, project)
    return await project_limits.set_limits(database, settings, project_id, update)


def _projects(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        if args.action == "list":
            listing = run_with_database(lambda database: project_limits.list_limits(database, settings), settings)
            if args.json:
                print(listing.model_dump_json(indent=2))
            else:
                for project in listing.data:
                    print(_line(project))
        else:
            update = _update(args)
            limits = run_with_database(lambda database: _set_limits(database, settings, args.project, update), settings)
            print(limits.model_dump_json(indent=2) if args.json else _show(limits))
    except (ApiError, SchemaOutOfDate) as error:
        print(f"llama-responses: {error}", file=sys.stderr)
        return 1
    return 0
