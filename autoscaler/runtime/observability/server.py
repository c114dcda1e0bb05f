"""The HTTP endpoints a Deployment needs: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for kubelet.

- ``/healthz`` (liveness) fails when the reconcile loop has stopped making progress, so kubelet restarts a
  wedged process. Standbys must heartbeat too (their loop waits for the lease), or they would be restarted.
- ``/readyz`` (readiness) passes once the watch caches are synced and a valid configuration is loaded. It
  does not depend on leadership: a standby is ready, and a bad config reload does not un-ready a replica that
  keeps running on its last good configuration. Its detail says whether this replica leads, and if not why
  (the Lease's namespace missing, RBAC refusing the Lease, another identity holding it).

The server is the standard library's ``ThreadingHTTPServer`` on a daemon thread: a scrape or probe never
waits behind a reconcile, and nothing here may keep the process alive at shutdown.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from autoscaler.core.quantity import format_duration
from autoscaler.runtime.observability.metrics import Metrics

__all__ = ["METRICS_CONTENT_TYPE", "HealthServer", "HealthState", "parse_address"]

log = structlog.get_logger("tidal.server")

# Spelled out rather than taken from prometheus_client, whose CONTENT_TYPE_LATEST moved to version 1.0.0
# while Metrics.render() still writes the 0.0.4 text format.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"


class HealthState:
    """What the probes report, updated by the controller from its own thread; every method is thread-safe."""

    def __init__(
        self, *, staleness_limit: float | Callable[[], float] = 300.0, clock: Callable[[], float] = time.time
    ) -> None:
        """``staleness_limit``: seconds without a heartbeat after which ``/healthz`` fails, or a function
        giving them, read at every check (the daemon derives it from the scan interval in use).

        ``clock`` defaults to Unix time because the controller passes its reconcile ``now`` (Unix time, as in
        ``Metrics.observe_reconcile``) to ``heartbeat``; both must come from the same clock.

        The limit should comfortably exceed the longest expected reconcile (cloud calls with retries), since
        a liveness failure restarts the process.
        """
        self.staleness_limit = staleness_limit
        self.clock = clock
        self._lock = threading.Lock()
        self._synced = False
        self._config_loaded = False
        self._config_ok = True
        # Counting from construction gives start-up (cache sync, first reconcile) one staleness window.
        self._last_heartbeat = clock()
        self._leadership: Callable[[], str] | None = None
        self._not_ready: str | None = None

    def report_not_ready(self, reason: str | None) -> None:
        """Why the replica cannot be ready before its caches sync (the API server unreachable, a watch
        that cannot list), or None once that has passed; ``/readyz`` says it instead of a generic line."""
        with self._lock:
            self._not_ready = reason

    def report_leadership(self, describe: Callable[[], str]) -> None:
        """Where ``/readyz`` reads its leadership detail (one line, e.g. ``not leading (lease ns/name): …``)."""
        with self._lock:
            self._leadership = describe

    def mark_synced(self) -> None:
        """The watch caches have synced; the controller's view of the cluster is complete."""
        with self._lock:
            self._synced = True

    def mark_config_ok(self, ok: bool) -> None:
        """Whether the latest configuration load was valid; the first valid one makes the replica ready."""
        with self._lock:
            self._config_ok = ok
            self._config_loaded = self._config_loaded or ok

    def heartbeat(self, now: float | None = None) -> None:
        """The loop made progress at ``now`` (from the same clock as ``clock``; default: ``clock()``)."""
        with self._lock:
            self._last_heartbeat = self.clock() if now is None else now

    def liveness(self) -> tuple[bool, str]:
        """(alive, one-line reason) for ``/healthz``."""
        with self._lock:
            last = self._last_heartbeat
        age = self.clock() - last
        limit = self.staleness_limit() if callable(self.staleness_limit) else self.staleness_limit
        if age > limit:
            return (
                False,
                f"reconcile loop stalled: no progress for {format_duration(age)} (limit {format_duration(limit)})",
            )
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """(ready, one-line reason) for ``/readyz``."""
        with self._lock:
            synced, loaded, config_ok = self._synced, self._config_loaded, self._config_ok
            leadership = self._leadership
            not_ready = self._not_ready
        if not synced:
            return False, not_ready or "watch caches not synced yet"
        if not loaded:
            return False, "no valid configuration loaded yet"
        detail = "ok"
        if not config_ok:
            detail = "ok (last configuration reload was invalid; running on the last good one)"
        if leadership is not None:
            try:
                detail = f"{detail}; {leadership()}"
            except Exception as err:  # a probe must answer whatever the elector's state
                detail = f"{detail}; leadership unknown ({type(err).__name__})"
        return True, detail


def parse_address(address: str) -> tuple[str, int, socket.AddressFamily]:
    """``":8080"``, ``"127.0.0.1:0"``, ``"[::1]:9090"`` → (host, port, family); an empty host means all IPv4."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {address!r} is not host:port (e.g. :8080)")
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1], int(port), socket.AF_INET6
    if ":" in host:
        raise ValueError(f"metrics address {address!r}: write an IPv6 host in brackets, e.g. [::1]:8080")
    return host or "0.0.0.0", int(port), socket.AF_INET


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Lets a restarted process rebind at once instead of waiting out TIME_WAIT.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: HealthServer) -> None:
        self.address_family = family
        self.owner = owner
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                status, body, content_type = 200, owner.metrics.render(), METRICS_CONTENT_TYPE
            except Exception as err:
                log.error("rendering metrics failed", error=repr(err))
                status, body, content_type = 500, b"rendering metrics failed\n", _TEXT
        elif path in ("/healthz", "/readyz"):
            check = owner.health.liveness if path == "/healthz" else owner.health.readiness
            ok, reason = check()
            status, body, content_type = (200 if ok else 500), (reason + "\n").encode(), _TEXT
        else:
            status, body, content_type = 404, b"not found\n", _TEXT
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # The default writes every probe and scrape to stderr, bypassing structured logging.
        log.debug("http request", client=self.client_address[0], request=format % args)


class HealthServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``address`` from a daemon thread."""

    def __init__(self, address: str, metrics: Metrics, health: HealthState) -> None:
        """Nothing is bound until ``start()``; ``address`` is checked now (ValueError when malformed)."""
        self.address = address
        self.metrics = metrics
        self.health = health
        self._bind = parse_address(address)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0); raises RuntimeError before ``start()``."""
        if self._server is None:
            raise RuntimeError("the health server is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Bind and serve in a daemon thread; OSError when the address cannot be bound. Idempotent."""
        if self._server is not None:
            return
        host, port, family = self._bind
        self._server = _Server((host, port), family, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="tidal-http", daemon=True
        )
        self._thread.start()
        log.info("serving metrics and health", address=self.address, port=self.port)

    def stop(self) -> None:
        """Stop serving and release the port; safe to call when not started."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
