"""Structured logging: JSON lines in the cluster, readable console output in a terminal.

structlog is routed through the standard library's ``logging`` so the Kubernetes client, cloud SDKs and
urllib3 come out in the same format and pass through the same redaction as tidal's own events.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = ["REDACTED", "configure_logging", "redact_secrets"]

REDACTED = "[REDACTED]"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_SECRET_KEY = re.compile(
    r"token|password|passwd|secret|authorization|credential|api[-_]?key|private[-_]?key", re.IGNORECASE
)
# Idempotency tokens (our LaunchRequest's, EC2's ClientToken) identify a launch and grant nothing; redacting
# them would hide exactly what is needed to trace a duplicate launch.
_NOT_SECRET = frozenset({"idempotency_token", "idempotencytoken", "client_token", "clienttoken"})
# These log request and response bodies, signed headers included, at DEBUG; tidal never wants that.
_CHATTY_LOGGERS = ("botocore", "boto3", "urllib3", "azure", "google", "kubernetes.client.rest")
_HANDLER_NAME = "tidal"
_MAX_DEPTH = 8


def _is_secret(key: object) -> bool:
    return isinstance(key, str) and key.lower() not in _NOT_SECRET and bool(_SECRET_KEY.search(key))


def _redact(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {k: REDACTED if _is_secret(k) else _redact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact(v, depth + 1) for v in value)
    return value


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """structlog processor: replace the value of every key named like a credential, at any nesting depth."""
    for key in list(event_dict):
        if _is_secret(key):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact(event_dict[key], 1)
    return event_dict


def _json_wanted(fmt: str, stream: TextIO) -> bool:
    if fmt == "json":
        return True
    if fmt == "console":
        return False
    if fmt != "auto":
        raise ValueError(f"log format {fmt!r} is not one of auto, json, console")
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def configure_logging(fmt: str = "auto", level: str = "info", *, stream: TextIO | None = None) -> None:
    """Set up structlog and the standard library's root logger; safe to call again (e.g. on config reload).

    ``fmt`` is ``json``, ``console`` or ``auto`` (JSON unless ``stream`` is a terminal); ``level`` is debug,
    info, warning or error. Output goes to ``stream`` (default stdout, where container runtimes collect it).
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of debug, info, warning, error")
    threshold = _LEVELS[level.lower()]
    out = sys.stdout if stream is None else stream
    as_json = _json_wanted(fmt, out)

    # Shared by tidal's own events and by records from other libraries' standard loggers.
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    renderer: Processor
    if as_json:
        # Tracebacks without local variables: a frame's locals can hold credentials or whole cloud responses.
        final: list[Processor] = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
        renderer = structlog.processors.JSONRenderer()
    else:
        final = []
        isatty = getattr(out, "isatty", None)
        renderer = structlog.dev.ConsoleRenderer(
            colors=bool(callable(isatty) and isatty()), exception_formatter=structlog.dev.plain_traceback
        )

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: loggers created at import time must pick up a later reconfiguration.
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final, renderer],
        )
    )
    root = logging.getLogger()
    # Replace only the handler a previous call installed; others (pytest's capture, say) are not ours.
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(threshold, logging.WARNING))
    # urllib3 warns of every connection retry it makes on its own; tidal reports the failure that matters
    # (the API server unreachable, a watch failing) once, with the server and the cause.
    logging.getLogger("urllib3.connectionpool").setLevel(max(threshold, logging.ERROR))
