"""HTTP layer of the fake API server: routing, verbs, faults, authorisation and watch streaming.

Requests are served by a stdlib ThreadingHTTPServer speaking HTTP/1.1 (keep-alive, chunked watch streams),
which is what the `kubernetes` client's urllib3 pool expects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fakes import kube_admission
from tests.fakes.kube_errors import ApiError, status_object, success_status
from tests.fakes.kube_patch import STRATEGIC_MERGE_PATCH
from tests.fakes.kube_resources import ResourceType
from tests.fakes.kube_selectors import make_matcher

if TYPE_CHECKING:
    from tests.fakes.kube_apiserver import FakeApiServer

log = logging.getLogger(__name__)


class RecordedRequest(NamedTuple):
    """One request as the server saw it: HTTP method, path, query (last value per key)."""

    method: str
    path: str
    query: dict[str, str]


class _Route(NamedTuple):
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


class KubeHttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that can close its keep-alive connections on shutdown."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def close_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().close_request(request)

    def close_all_connections(self) -> None:
        # Keep-alive connections park their handler threads in readline(); shutting the sockets frees them.
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class KubeRequestHandler(BaseHTTPRequestHandler):
    """Serves one connection; `fake` is bound per server by FakeApiServer.start()."""

    protocol_version = "HTTP/1.1"
    fake: FakeApiServer  # bound by FakeApiServer.start()

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle + delayed ACK add ~40 ms a request.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake-apiserver: " + format, *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- request plumbing ------------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        record = RecordedRequest(method, parts.path, query)
        fake = self.fake
        fake.requests.append(record)
        try:
            if fake.on_request is not None:
                fake.on_request(record)
            route: _Route | None = None
            route_error: ApiError | None = None
            document: Any = None
            try:
                document, route = self._route(parts.path)
            except ApiError as exc:
                route_error = exc
            verb = self._verb(method, route, query) if route else None
            fault = fake.faults.take(
                method,
                verb,
                route.rt.plural if route else self._plural_guess(parts.path),
                route.subresource if route else None,
            )
            if fault is not None:
                raise ApiError(
                    fault.status,
                    fault.describe(),
                    details={"retryAfterSeconds": int(fault.retry_after)} if fault.retry_after else None,
                    retry_after=fault.retry_after,
                )
            if route_error is not None:
                raise route_error
            if route is None:
                if method != "GET":
                    raise ApiError(405, "the server does not allow this method on the requested resource")
                self._send(200, document)
                return
            assert verb is not None
            self._authorize(verb, route)
            self._dispatch(method, verb, route, query, raw_body)
        except ApiError as exc:
            headers = {"Retry-After": str(int(exc.retry_after))} if exc.retry_after else {}
            self._send(exc.code, exc.status(), headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the fake: report it to the client *and* to the test
            log.exception("fake-apiserver: %s %s failed", method, self.path)
            fake.server_errors.append(exc)
            self._send(500, status_object(500, f"Internal error occurred: fake apiserver bug: {exc!r}"))

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if isinstance(body, str):
            data, content_type = body.encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(body).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _json_body(self, raw: bytes) -> Any:
        try:
            return json.loads(raw or b"null")
        except ValueError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc

    @staticmethod
    def _plural_guess(path: str) -> str | None:
        # Unknown resources can still be targeted by faults by their plural.
        segments = [s for s in path.split("/") if s]
        if len(segments) >= 4 and segments[0] == "apis":
            rest = segments[3:]
        elif len(segments) >= 3 and segments[0] == "api":
            rest = segments[2:]
        else:
            return None
        if len(rest) >= 3 and rest[0] == "namespaces":
            rest = rest[2:]
        return rest[0] if rest else None

    def _route(self, path: str) -> tuple[Any, _Route | None]:
        """Either a non-resource document (discovery, version, health) or a resource route."""
        registry = self.fake.registry
        segments = [unquote(s) for s in path.split("/") if s]
        not_found = ApiError(404, "the server could not find the requested resource", details={})
        if not segments:
            return {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}, None
        if segments[0] in ("healthz", "livez", "readyz") and len(segments) == 1:
            return "ok", None
        if segments == ["version"]:
            return {
                "major": "1",
                "minor": "31",
                "gitVersion": "v1.31.0-tidal-fake",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2024-08-13T00:00:00Z",
                "goVersion": "go1.22.5",
                "compiler": "gc",
                "platform": "linux/amd64",
            }, None
        if segments[0] == "api":
            if len(segments) == 1:
                return registry.api_versions(self.fake.url.removeprefix("http://")), None
            group, version, rest = "", segments[1], segments[2:]
        elif segments[0] == "apis":
            if len(segments) == 1:
                return registry.api_group_list(), None
            if len(segments) == 2:
                document = registry.api_group(segments[1])
                if document is None:
                    raise not_found
                return document, None
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            raise not_found
        if not rest:
            document = registry.api_resource_list(group, version)
            if document is None:
                raise not_found
            return document, None
        namespace = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found
        rt = registry.lookup(group, version, rest[0])
        if rt is None or (namespace is not None and not rt.namespaced):
            raise not_found
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and subresource not in rt.subresources:
            raise not_found
        return None, _Route(rt, namespace, name, subresource)

    @staticmethod
    def _verb(method: str, route: _Route, query: dict[str, str]) -> str:
        if method == "GET":
            if route.name is not None:
                return "get"
            return "watch" if _truthy(query.get("watch")) else "list"
        if method == "DELETE":
            return "delete" if route.name is not None else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())

    def _authorize(self, verb: str, route: _Route) -> None:
        authorizer = self.fake.authorizer
        rt = route.rt
        if authorizer is None or authorizer(
            verb, rt.group, rt.plural, route.subresource or "", route.namespace or ""
        ):
            return
        resource = f"{rt.plural}/{route.subresource}" if route.subresource else rt.plural
        subject = f'{rt.qualified} "{route.name}"' if route.name else rt.qualified
        scope = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
        message = (
            f'{subject} is forbidden: User "{self.fake.user}" cannot {verb} resource "{resource}" '
            f'in API group "{rt.group}" {scope}'
        )
        details = {
            "kind": rt.plural,
            **({"name": route.name} if route.name else {}),
            **({"group": rt.group} if rt.group else {}),
        }
        raise ApiError(403, message, details=details)

    # --- verbs -----------------------------------------------------------------------------------------

    def _dispatch(self, method: str, verb: str, route: _Route, query: dict[str, str], raw: bytes) -> None:
        fake, store = self.fake, self.fake.store
        rt, namespace, name, sub = route
        dry_run = bool(query.get("dryRun"))
        if sub is None and name is None:
            if verb == "list":
                self._send(200, self._list(rt, namespace, query))
            elif verb == "watch":
                self._watch(rt, namespace, query)
            elif verb == "create":
                self._create(rt, namespace, self._json_body(raw), dry_run)
            elif verb == "deletecollection":
                match = make_matcher(rt, query.get("labelSelector"), query.get("fieldSelector"))
                for obj in store.select(rt, namespace, match).items:
                    meta = obj["metadata"]
                    store.delete(
                        rt, meta.get("namespace"), meta["name"], self._delete_options(raw, query), dry_run
                    )
                self._send(200, success_status(200))
            else:
                raise ApiError(405, f"{method} is not supported on a collection")
            return
        assert name is not None
        if rt.namespaced and namespace is None:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if sub in (None, "status") and method == "GET":
            self._send(200, store.get(rt, namespace, name))
        elif sub in (None, "status") and method == "PUT":
            body = self._json_body(raw)
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            self._send(200, store.update(rt, namespace, name, body, sub, dry_run))
        elif sub in (None, "status") and method == "PATCH":
            content_type = self.headers.get("Content-Type", STRATEGIC_MERGE_PATCH)
            self._send(
                200, store.patch(rt, namespace, name, self._json_body(raw), content_type, sub, dry_run)
            )
        elif sub is None and method == "DELETE":
            obj, removed = store.delete(rt, namespace, name, self._delete_options(raw, query), dry_run)
            if removed and not (rt.custom or rt.storage_key == ("", "pods")):
                details = {"name": name, "kind": rt.plural, "uid": obj["metadata"]["uid"]}
                if rt.group:
                    details["group"] = rt.group
                self._send(200, success_status(200, details))
            else:
                self._send(200, obj)
        elif sub == "eviction" and method == "POST":
            code, status = kube_admission.evict(
                store, fake.registry, namespace or "", name, self._json_body(raw) or {}, dry_run
            )
            self._send(code, status)
        elif sub == "binding" and method == "POST":
            self._send(
                201,
                kube_admission.bind(
                    store, fake.registry, namespace or "", name, self._json_body(raw) or {}, dry_run
                ),
            )
        else:
            raise ApiError(405, f"{method} is not supported on {rt.plural}{'/' + sub if sub else ''}")

    def _list(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
        selectors = query.get("labelSelector"), query.get("fieldSelector")
        match = make_matcher(rt, *selectors) if any(selectors) else None
        try:
            limit = int(query.get("limit") or 0)
        except ValueError as exc:
            raise ApiError(400, f"invalid limit {query.get('limit')!r}") from exc
        page = self.fake.store.select(rt, namespace, match, limit, query.get("continue") or None)
        metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            metadata["continue"] = page.continue_token
            if page.remaining is not None:
                metadata["remainingItemCount"] = page.remaining
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": page.items}

    def _create(self, rt: ResourceType, namespace: str | None, body: Any, dry_run: bool) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        if rt.namespaced and namespace is None:
            raise ApiError(405, f"create of {rt.plural} needs a namespace in the path")
        if rt.storage_key == ("", "bindings"):
            pod_name = (body.get("metadata") or {}).get("name", "")
            self._send(
                201,
                kube_admission.bind(
                    self.fake.store, self.fake.registry, namespace or "", pod_name, body, dry_run
                ),
            )
            return
        if body.get("kind") and body["kind"] != rt.kind:
            raise ApiError(400, f"the kind {body['kind']!r} of the request body does not match {rt.kind!r}")
        body = dict(body)
        kube_admission.prepare_for_create(rt, body)
        self._send(201, self.fake.admit_and_create(rt, body, namespace, dry_run))

    def _delete_options(self, raw: bytes, query: dict[str, str]) -> dict[str, Any]:
        body = self._json_body(raw) if raw else None
        options = dict(body) if isinstance(body, dict) else {}
        if "gracePeriodSeconds" in query:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        return options

    # --- watch -----------------------------------------------------------------------------------------

    def _watch(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        """Stream newline-delimited JSON events over a chunked response until timeout or shutdown."""
        fake, store = self.fake, self.fake.store
        match = make_matcher(rt, query.get("labelSelector"), query.get("fieldSelector"))
        try:
            timeout = float(query.get("timeoutSeconds") or fake.default_watch_timeout)
        except ValueError as exc:
            raise ApiError(400, f"invalid timeoutSeconds {query.get('timeoutSeconds')!r}") from exc
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        send_initial = _truthy(query.get("sendInitialEvents"))
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            try:
                rv = None if send_initial else query.get("resourceVersion")
                epoch = store.watch_epoch
                events, cursor = store.watch_open(rt, namespace, match, rv)
                self._write_events(events)
                if send_initial and bookmarks:
                    self._write_bookmark(rt, cursor, initial_events_end=True)
                next_bookmark = time.monotonic() + fake.bookmark_interval
                while not store.closed and store.watch_epoch == epoch:
                    now = time.monotonic()
                    if now >= deadline:
                        break
                    wake = min(deadline, next_bookmark) if bookmarks else deadline
                    events, cursor = store.watch_wait(cursor, rt, namespace, match, max(0.0, wake - now))
                    self._write_events(events)
                    if bookmarks and time.monotonic() >= next_bookmark:
                        self._write_bookmark(rt, cursor)
                        next_bookmark = time.monotonic() + fake.bookmark_interval
            except ApiError as exc:
                # Watch errors arrive in-band, as an ERROR event carrying the Status (410 Expired above all).
                self._write_line({"type": "ERROR", "object": exc.status()})
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            # The client went away (Watch.stop(), timeout on its side, or server shutdown).
            self.close_connection = True

    def _write_line(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _write_events(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        for etype, obj in events:
            self._write_line({"type": etype, "object": obj})

    def _write_bookmark(self, rt: ResourceType, cursor: int, initial_events_end: bool = False) -> None:
        metadata: dict[str, Any] = {"resourceVersion": str(cursor)}
        if initial_events_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        self._write_line(
            {
                "type": "BOOKMARK",
                "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata},
            }
        )
