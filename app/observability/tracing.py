"""OpenTelemetry traces: off unless the standard OTEL_* settings ask for them (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_TRACES_EXPORTER). One trace runs from the API request through the queue (its context travels in the job)
to the generation, wherever that runs, with spans for prompt rendering, prefill and decode."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind

if TYPE_CHECKING:  # the job side (workers) imports this module too: no web framework loaded for it
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncEngine

TRACER_NAME = "llama_responses"
#: Scrapes and probes are not worth a trace each.
UNTRACED_URLS = "/metrics,/health,/ready"


def wanted() -> bool:
    """Whether the environment asks for traces (the OpenTelemetry SDK's own settings)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def enabled() -> bool:
    """An SDK tracer provider is installed in this process (by configure_tracing, or by a test)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def _exporter_from_environment() -> SpanExporter:
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    # OTLP over HTTP: it reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS and the rest itself.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def configure_tracing(service_name: str, exporter: SpanExporter | None = None) -> bool:
    """Install the process's tracer provider once: with `exporter` (spans sent as they end, for tests), else
    when the environment asks for traces. True when tracing is on."""
    if enabled():
        return True
    if exporter is None and not wanted():
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_exporter_from_environment()))
    trace.set_tracer_provider(provider)
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    # Process-wide: every Redis client made from now on (the queue, the event bus) makes spans.
    RedisInstrumentor().instrument()
    return True


def instrument_app(app: FastAPI) -> None:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, excluded_urls=UNTRACED_URLS)


def instrument_database(engine: AsyncEngine) -> None:
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    # NOTE: the instrumentation declares SQLAlchemy < 2.1 and refuses 2.1 (its event hooks work unchanged there).
    SQLAlchemyInstrumentor().instrument(engine=engine.sync_engine, skip_dep_check=True)


def uninstrument_database() -> None:
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    SQLAlchemyInstrumentor().uninstrument()


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def context_carrier() -> dict[str, str]:
    """The current trace context as W3C headers (traceparent, tracestate), to travel in a job; {} when off."""
    carrier: dict[str, str] = {}
    if enabled():
        propagate.inject(carrier)
    return carrier


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Span]:
    with tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


@contextmanager
def job_span(name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any]) -> Iterator[Span]:
    """A span continuing the trace whose context the job carries (the request that queued it)."""
    parent = propagate.extract(dict(carrier)) if carrier else None
    with tracer().start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes) as job:
        yield job


def record_span(name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None) -> None:
    """A finished child span of the current one, from times measured meanwhile (prefill, decode)."""
    finished = tracer().start_span(name, start_time=start_ns, attributes=attributes)
    finished.end(end_time=end_ns)
