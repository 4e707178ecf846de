"""`llama-responses serve | worker | migrate | check`, and the operator's `responses list|show|delete`, `prune` and
`keys create|list|revoke` and `projects list|limits`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pydantic import ValidationError

from app.config import Settings, setting_problems
from app.db.migrations import SchemaOutOfDate, prepare_database
from app.generation.embeddings.models import load_embedding_models
from app.generation.registry import ModelConfigError
from app.generation.registry_loading import load_registry
from app.generation.types import ModelLoadError
from app.keys import cli as keys_cli
from app.keys import projects_cli
from app.ops.operator_cli import add_commands
from app.outbound.addresses import AllowedHosts, AllowedHostsInvalid


def _fail(message: object) -> int:
    print(f"llama-responses: {message}", file=sys.stderr)
    return 2


def _preflight(settings: Settings) -> str | None:
    """Why this process cannot start (an allow-list it cannot use, models that cannot be served, an old schema), in
    one line; None when it can."""
    try:
        AllowedHosts.parse(settings.outbound_allowed_hosts)
    except AllowedHostsInvalid as error:
        return str(error)
    try:
        registry = load_registry(settings)  # API nodes need the models too (their vocabularies)
        load_embedding_models(settings, registry.ids)
        asyncio.run(prepare_database(settings))
    except (ModelConfigError, SchemaOutOfDate) as error:
        return str(error)
    return None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from app.api.http_protocol import ApiShapedH11Protocol
    from app.api.request_guards import MAX_HEADER_BYTES
    from app.main import create_app
    from app.observability.logs import configure_logging, with_query_values_dropped

    settings = Settings()
    if (problem := _preflight(settings)) is not None:
        return _fail(problem)
    # Text: uvicorn's own log config, as ever. JSON: ours, for every logger, uvicorn's access log included.
    # Either way, access lines drop query values (metadata filter values).
    log_config: dict[str, Any] | None = with_query_values_dropped(LOGGING_CONFIG)
    # The app's own lines go to the root logger (uvicorn's text config covers only uvicorn's: without this a model's
    # load and its warnings were never seen).
    configure_logging(settings.log_format, args.log_level)
    if settings.log_format == "json":
        log_config = None
    app = create_app(settings, database_ready=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        log_config=log_config,
        # Requests uvicorn refuses before the app sees them are answered in the API's error shape too.
        http=ApiShapedH11Protocol,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    return 0


def _worker(args: argparse.Namespace) -> int:
    settings = Settings()
    if settings.embedded:
        return _fail("the worker needs RESPONSES_REDIS_URL (distributed mode)")
    if (problem := _preflight(settings)) is not None:
        return _fail(problem)
    try:
        # --model (or RESPONSES_WORKER_MODELS), aliases allowed; else every declared model.
        names = args.model or [name.strip() for name in (settings.worker_models or "").split(",") if name.strip()]
        registry = load_registry(settings)
        embedding = load_embedding_models(settings, registry.ids)
        # Embedding models are named as served ones are; none named: every declared model of both kinds.
        embedding_ids = [name for name in names if embedding.get(name) is not None] if names else embedding.ids
        generation_names = [name for name in names if embedding.get(name) is None]
        models = registry.resolve(generation_names) if generation_names or not names else []
    except ModelConfigError as error:
        return _fail(error)
    from app.observability.logs import configure_logging
    from worker.main import SupervisedWorker, serve_metrics, worker_settings

    configure_logging(settings.log_format)
    if args.metrics_port is not None:
        serve_metrics(args.metrics_host, args.metrics_port)
    try:
        SupervisedWorker(**worker_settings(settings, models, embedding_ids)).run()
    except ModelLoadError as error:  # one of its models could not be loaded before its first heartbeat
        return _fail(error)
    return 0


def _migrate(_: argparse.Namespace) -> int:
    from app.db.migrations import upgrade_to_head

    settings = Settings()
    upgrade_to_head(settings.database_url)
    print(f"llama-responses: database at head ({settings.database_url.split('@')[-1]})")
    return 0


def _check(_: argparse.Namespace) -> int:
    from app.ops.check import load_settings, report, run_checks

    settings, loaded = load_settings()
    findings = [loaded, *(asyncio.run(run_checks(settings)) if settings is not None else [])]
    print(report(findings))
    return 0 if all(finding.ok for finding in findings) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-responses",
        description="A self-hosted, stateful OpenAI Responses API server on llama.cpp. "
        "Settings come from RESPONSES_* environment variables (see docs/reference/settings.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API server (embedded mode: with the model in-process)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(run=_serve)
    worker = commands.add_parser("worker", help="run an arq worker that loads its models and generates")
    worker.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model to serve (repeat for several; default: RESPONSES_WORKER_MODELS, else every declared model)",
    )
    worker.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    worker.add_argument("--metrics-host", default="127.0.0.1", help="the address the metrics port binds")
    worker.set_defaults(run=_worker)
    migrate = commands.add_parser("migrate", help="upgrade the configured database to the latest schema")
    migrate.set_defaults(run=_migrate)
    check = commands.add_parser(
        "check", help="check the settings, models, database schema and Redis; say how to fix what is wrong"
    )
    check.set_defaults(run=_check)
    add_commands(commands)
    keys_cli.add_commands(commands)
    projects_cli.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except ValidationError as error:
        if error.title != Settings.__name__:
            raise
        return _fail("invalid settings:\n" + "\n".join(f"  {problem}" for problem in setting_problems(error)))
    return code


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
