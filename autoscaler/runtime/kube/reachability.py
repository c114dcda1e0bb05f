"""Whether the API server is there, and the one line a user reads when it is not.

tidal probes ``/version`` before it starts its watches: without an API server every informer would retry
on its own, and the user would read dozens of retry lines and then a timeout instead of the cause. The
probe's answer names the server and the error (``connection refused``, ``certificate verify failed``,
``401 Unauthorized``); ``tidal run`` retries it with growing pauses, one log line per attempt, while
``/readyz`` reports it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import kubernetes.client
import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, SSLError

from autoscaler.runtime.kube.client import KubeClient, api_error_message

__all__ = ["BACKOFF_CAP", "probe", "server_url", "wait_for_api_server"]

log = structlog.get_logger("tidal.kube")

BACKOFF_CAP = 60.0
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def server_url(client: KubeClient) -> str:
    """The API server's address as the kubeconfig or the in-cluster environment gave it."""
    host: str = client.api_client.configuration.host
    return host


def _cause(err: BaseException) -> str:
    """The innermost reason a connection failed, in the words a user searches for."""
    reason: BaseException | None = err
    while isinstance(reason, MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    if isinstance(reason, SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
        text = str(reason)
        found = re.search(r"certificate verify failed: ([^(\"')]+)", text)
        return f"TLS: certificate verify failed{': ' + found.group(1).strip() if found else ''}"
    text = str(reason) if reason is not None else ""
    if "timed out" in text.lower():
        return "timed out"
    # "HTTPSConnection(host=..., port=1): Failed to establish a new connection: [Errno 111] Connection
    # refused" -> "connection refused"
    tail = text.rsplit(":", 1)[-1] if "Failed to establish" in text else text
    tail = _ERRNO.sub("", tail).strip().strip("'\"()")
    return (tail[:1].lower() + tail[1:]) if tail else type(reason).__name__


def probe(client: KubeClient, *, timeout: float = 5.0) -> str | None:
    """None when the API server answers; else one line naming it and what went wrong."""
    url = server_url(client)
    try:
        kubernetes.client.VersionApi(client.api_client).get_code(_request_timeout=timeout)
        return None
    except ApiException as err:
        if err.status in (401, 403):
            return (
                f"the Kubernetes API server at {url} refused tidal's credentials: HTTP {err.status} "
                f"{err.reason} ({api_error_message(err)})"
            )
        if err.status == 0 or err.status is None:
            return f"cannot reach the Kubernetes API server at {url}: {err.reason}"
        return f"the Kubernetes API server at {url} answered HTTP {err.status}: {api_error_message(err)}"
    except (Urllib3Error, OSError) as err:
        return f"cannot reach the Kubernetes API server at {url}: {_cause(err)}"


def wait_for_api_server(
    client: KubeClient,
    *,
    attempts: int | None = None,
    report: Callable[[str | None], None] = lambda _: None,
    stop: threading.Event | None = None,
    first_pause: float = 1.0,
    cap: float = BACKOFF_CAP,
    check: Callable[[KubeClient], str | None] = probe,
) -> str | None:
    """Probe until the API server answers; None once it does, else the last failure's line.

    ``attempts`` bounds the probes (``tidal run --once``); without it this waits for as long as it takes
    (the daemon), doubling the pause after each failure up to ``cap`` seconds. Each failure is logged once
    and handed to ``report`` (the daemon's readiness); ``report(None)`` once the server answers.
    """
    pause = first_pause
    attempt = 0
    waiter = stop or threading.Event()
    while True:
        attempt += 1
        failure = check(client)
        if failure is None:
            if attempt > 1:
                log.info("api_server_reachable", server=server_url(client), attempts=attempt)
            report(None)
            return None
        report(failure)
        last = attempts is not None and attempt >= attempts
        log.warning(
            "api_server_unreachable",
            error=failure,
            attempt=attempt,
            retry_in=None if last else round(pause, 1),
        )
        if last or waiter.wait(pause):
            return failure
        pause = min(pause * 2, cap)
