"""HTTP layer of the GCP fakes: routing of compute/v1 and Cloud Billing paths, faults and a call log.

Every request is recorded as the API method it is (``compute.instances.insert``,
``cloudbilling.services.skus.list``), which is what the IAM test compares with the custom role.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.gcp_billing import BillingState
from tests.fakes.gcp_compute import ComputeState
from tests.fakes.gcp_rules import GceError

Handler = Callable[[dict[str, str], dict[str, str], dict[str, Any]], dict[str, Any]]


@dataclass
class Call:
    """One request: the API method, HTTP verb, path and query."""

    method: str
    verb: str
    path: str
    query: dict[str, str]


@dataclass
class Exchange:
    """One request body and the answer sent for it, for checking both against the published API shapes."""

    method: str
    request: dict[str, Any]
    status: int
    response: dict[str, Any]


@dataclass
class Fault:
    """The next ``count`` calls of ``method`` (None: any) fail with this HTTP error; with ``lost`` the
    call is carried out first and only its answer is lost (the client sees the error)."""

    status: int
    reason: str
    message: str
    method: str | None = None
    count: int = 1
    retry_after: int | None = None
    lost: bool = False


def compute_routes(state: ComputeState) -> list[tuple[str, str, str, Handler]]:
    """(verb, path regexp, API method, handler) of the compute/v1 API the fake speaks."""
    s = state
    zone = r"/zones/(?P<zone>[^/]+)"
    return [
        (
            "GET",
            zone + r"/machineTypes",
            "compute.machineTypes.list",
            lambda p, q, b: s.listing("machineTypes", p["zone"], q),
        ),
        (
            "GET",
            zone + r"/acceleratorTypes",
            "compute.acceleratorTypes.list",
            lambda p, q, b: s.listing("acceleratorTypes", p["zone"], q),
        ),
        (
            "GET",
            r"/global/instanceTemplates/(?P<name>[^/]+)",
            "compute.instanceTemplates.get",
            lambda p, q, b: s.template(f"projects/{s.project}/global/instanceTemplates/{p['name']}"),
        ),
        (
            "GET",
            r"/regions/(?P<region>[^/]+)",
            "compute.regions.get",
            lambda p, q, b: s.region(p["region"]),
        ),
        (
            "GET",
            r"/regions/(?P<region>[^/]+)/instanceTemplates/(?P<name>[^/]+)",
            "compute.regionInstanceTemplates.get",
            lambda p, q, b: s.template(
                f"projects/{s.project}/regions/{p['region']}/instanceTemplates/{p['name']}"
            ),
        ),
        (
            "GET",
            zone + r"/reservations",
            "compute.reservations.list",
            lambda p, q, b: s.list_reservations(p["zone"]),
        ),
        (
            "GET",
            zone + r"/instanceGroupManagers",
            "compute.instanceGroupManagers.list",
            lambda p, q, b: s.group_list(p["zone"]),
        ),
        (
            "POST",
            zone + r"/instances",
            "compute.instances.insert",
            lambda p, q, b: s.insert(p["zone"], b, q.get("requestId")),
        ),
        (
            "GET",
            zone + r"/instances",
            "compute.instances.list",
            lambda p, q, b: s.list_instances(p["zone"], q),
        ),
        (
            "GET",
            zone + r"/instances/(?P<name>[^/]+)",
            "compute.instances.get",
            lambda p, q, b: s.get_instance(p["zone"], p["name"]),
        ),
        (
            "DELETE",
            zone + r"/instances/(?P<name>[^/]+)",
            "compute.instances.delete",
            lambda p, q, b: s.delete(p["zone"], p["name"], q.get("requestId")),
        ),
        (
            "GET",
            r"/aggregated/instances",
            "compute.instances.aggregatedList",
            lambda p, q, b: s.list_instances(None, q),
        ),
        (
            "GET",
            zone + r"/operations/(?P<name>[^/]+)",
            "compute.zoneOperations.get",
            lambda p, q, b: s.get_operation(p["zone"], p["name"]),
        ),
        (
            "POST",
            zone + r"/operations/(?P<name>[^/]+)/wait",
            "compute.zoneOperations.wait",
            lambda p, q, b: s.get_operation(p["zone"], p["name"], wait=1.0),
        ),
    ]


def billing_routes(state: BillingState) -> list[tuple[str, str, str, Handler]]:
    """(verb, path regexp, API method, handler) of the Cloud Billing Catalog API."""
    return [
        ("GET", r"/v1/services", "cloudbilling.services.list", lambda p, q, b: state.services(q)),
        (
            "GET",
            r"/v1/services/(?P<service>[^/]+)/skus",
            "cloudbilling.services.skus.list",
            lambda p, q, b: state.list_skus(p["service"], q),
        ),
    ]


class FakeHttpServer:
    """One fake API on 127.0.0.1:<free port>: routes, faults, a call log; ``prefix`` is stripped first."""

    def __init__(
        self,
        routes: list[tuple[str, str, str, Handler]],
        *,
        prefix: str = "",
        before: Callable[[], None] | None = None,
    ) -> None:
        self.routes = [
            (verb, re.compile(prefix + pattern + r"/?"), method, fn) for verb, pattern, method, fn in routes
        ]
        self.before = before
        self.calls: list[Call] = []
        self.exchanges: list[Exchange] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients use as api_endpoint."""
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeHttpServer:
        """Serve on a free port in a daemon thread."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                status, headers, body = fake.dispatch(
                    self.command, self.path, self.rfile.read(int(self.headers.get("Content-Length") or 0))
                )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (clients then get connection errors)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def methods(self) -> list[str]:
        """API methods called so far, in order."""
        with self.lock:
            return [c.method for c in self.calls]

    def dispatch(
        self, verb: str, raw_path: str, raw_body: bytes
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Route one request: record it, apply a due fault, call the handler."""
        split = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        for route_verb, pattern, method, handler in self.routes:
            m = pattern.fullmatch(split.path)
            if m is None or route_verb != verb:
                continue
            with self.lock:
                self.calls.append(Call(method, verb, split.path, query))
                fault = next((f for f in self.faults if f.method in (None, method) and f.count > 0), None)
                if fault is not None:
                    fault.count -= 1
            if fault is not None and not fault.lost:
                return self._fault(fault)
            body = json.loads(raw_body) if raw_body else {}
            try:
                if self.before is not None:
                    self.before()
                answer = handler(m.groupdict(), query, body)
            except GceError as err:
                return err.status, {}, err.body()
            with self.lock:
                self.exchanges.append(Exchange(method, body, 200, answer))
                del self.exchanges[:-2000]
            return self._fault(fault) if fault is not None else (200, {}, answer)
        return 404, {}, GceError(404, "notFound", f"no such API path {verb} {split.path}").body()

    @staticmethod
    def _fault(fault: Fault) -> tuple[int, dict[str, str], dict[str, Any]]:
        err = GceError(fault.status, fault.reason, fault.message)
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        return fault.status, headers, err.body()
