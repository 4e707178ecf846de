"""`llama-responses keys create|list|revoke`: the API keys kept in the database, straight against it (the same
service as /v1/keys)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from app.config import Settings
from app.db.migrations import SchemaOutOfDate, run_with_database
from app.errors import ApiError
from app.keys import service
from app.keys.schemas import ApiKey
from app.tenants.identity import ROLES


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = commands.add_parser("keys", help="create, list or revoke API keys (kept in the database, by project)")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key (and its project, if new); the key is printed once")
    create.add_argument("--project", required=True, help="the project's name: its keys share its data")
    create.add_argument("--name", required=True, help="what the key is for (shown in lists)")
    create.add_argument("--role", choices=ROLES, default="member", help="what the key may do (default: member)")
    create.add_argument("--json", action="store_true", help="print the key as the API returns it")
    listing = actions.add_parser("list", help="the keys, oldest first (never the keys themselves)")
    listing.add_argument("--project", help="only this project's keys")
    listing.add_argument("--json", action="store_true", help="print the list as the API returns it")
    revoke = actions.add_parser("revoke", help="revoke a key for good: refused everywhere within seconds")
    revoke.add_argument("key_id")
    keys.set_defaults(run=_keys)


def _when(unix_s: int | None) -> str:
    return "-" if unix_s is None else datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _line(key: ApiKey) -> str:
    state = f"revoked {_when(key.revoked_at)}" if key.revoked_at is not None else "active"
    return (
        f"{key.id}  {key.project}  {key.name}  {key.role:<6}  {key.redacted_value}  created {_when(key.created_at)}"
        f"  last used {_when(key.last_used_at)}  {state}"
    )


def _keys(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        if args.action == "create":
            request = service.check_request(args.project, args.name, args.role)
            created = run_with_database(lambda database: service.create_key(database, request), settings)
            if args.json:
                print(created.model_dump_json(indent=2))
            else:
                print(created.value)
                print(
                    f"created {created.id} ({created.role}) in project {created.project}: keep the key above, "
                    "it is not shown again",
                    file=sys.stderr,
                )
        elif args.action == "list":
            listing = run_with_database(lambda database: service.list_keys(database, args.project), settings)
            if args.json:
                print(listing.model_dump_json(indent=2))
            else:
                for key in listing.data:
                    print(_line(key))
        else:
            revoked = run_with_database(lambda database: service.revoke_key(database, args.key_id), settings)
            print(f"revoked {revoked.id} ({revoked.name} in project {revoked.project})")
    except (ApiError, SchemaOutOfDate) as error:
        print(f"llama-responses: {error}", file=sys.stderr)
        return 1
    return 0
