"""HTTP side of the fake ARM: the route table (each route with the RBAC action ARM checks for it) and
the request handler, which answers long-running operations in both ARM styles and always sends
Retry-After. The state and the test-facing object live in azure_compute and azure_arm.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.fakes.azure_auth import FAKE_TOKEN
from tests.fakes.azure_model import ArmError, Operation, parse_filter_value
from tests.fakes.azure_reservations import check_group

if TYPE_CHECKING:
    from tests.fakes.azure_arm import FakeArm

_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute"
_ROUTES: tuple[tuple[str, str, str, str], ...] = (
    # (method, path pattern, handler, RBAC action ARM checks)
    ("GET", _SUB + r"/providers/Microsoft\.Compute/skus", "skus", "Microsoft.Compute/skus/read"),
    (
        "GET",
        _SUB + r"/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)",
        "operation",
        "Microsoft.Compute/locations/operations/read",
    ),
    (
        "GET",
        _RG + r"/virtualMachineScaleSets",
        "list_scale_sets",
        "Microsoft.Compute/virtualMachineScaleSets/read",
    ),
    (
        "GET",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)",
        "get_scale_set",
        "Microsoft.Compute/virtualMachineScaleSets/read",
    ),
    (
        "PATCH",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)",
        "patch_scale_set",
        "Microsoft.Compute/virtualMachineScaleSets/write",
    ),
    (
        "PUT",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)",
        "put_scale_set",
        "Microsoft.Compute/virtualMachineScaleSets/write",
    ),
    (
        "POST",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)/delete",
        "delete_instances",
        "Microsoft.Compute/virtualMachineScaleSets/delete/action",
    ),
    (
        "GET",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)/virtualMachines",
        "list_scale_set_vms",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ),
    (
        "GET",
        _RG + r"/virtualMachineScaleSets/(?P<ss>[^/]+)/virtualMachines/(?P<id>[^/]+)",
        "get_scale_set_vm",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ),
    ("GET", _RG + r"/virtualMachines", "list_vms", "Microsoft.Compute/virtualMachines/read"),
    ("GET", _RG + r"/virtualMachines/(?P<vm>[^/]+)", "get_vm", "Microsoft.Compute/virtualMachines/read"),
    ("PUT", _RG + r"/virtualMachines/(?P<vm>[^/]+)", "put_vm", "Microsoft.Compute/virtualMachines/write"),
    (
        "DELETE",
        _RG + r"/virtualMachines/(?P<vm>[^/]+)",
        "delete_vm",
        "Microsoft.Compute/virtualMachines/delete",
    ),
    (
        "GET",
        _RG + r"/capacityReservationGroups/(?P<group>[^/]+)",
        "get_capacity_reservation_group",
        "Microsoft.Compute/capacityReservationGroups/read",
    ),
    (
        "GET",
        _RG + r"/capacityReservationGroups/(?P<group>[^/]+)/capacityReservations",
        "list_capacity_reservations",
        "Microsoft.Compute/capacityReservationGroups/capacityReservations/read",
    ),
    ("GET", r"/api/retail/prices", "prices", ""),
)
_COMPILED = [(m, re.compile(p + r"/?$", re.IGNORECASE), h, a) for m, p, h, a in _ROUTES]


@dataclass(frozen=True)
class Exchange:
    """One request body and the answer sent for it (route handler, status), for the shape checks."""

    handler: str
    request: Any
    status: int
    response: Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    action: str  # the RBAC action ARM checks ("" for the unauthenticated price sheet)
    status: int = 0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f0+00:00")


class ArmHandler(BaseHTTPRequestHandler):
    """Serves one connection's requests against ``fake`` (set on a subclass per server)."""

    fake: FakeArm
    _request: tuple[str, str, dict[str, str], str]
    _exchange: tuple[str, Any]
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; Nagle would delay the second

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = next(
            (
                (h, m.groupdict(), a)
                for meth, rx, h, a in _COMPILED
                if meth == method and (m := rx.match(parts.path))
            ),
            None,
        )
        self._request = (method, parts.path, query, route[2] if route else "")
        if route is None:
            self._error(ArmError(404, "NoRegisteredProviderFound", f"no route for {method} {parts.path}"))
            return
        handler, args, action = route
        self._exchange = (handler, None)
        try:
            if action and self.headers.get("Authorization") != f"Bearer {FAKE_TOKEN}":
                raise ArmError(401, "AuthenticationFailed", "missing or wrong bearer token")
            if action and args.get("sub") != self.fake.subscription:
                raise ArmError(404, "SubscriptionNotFound", f"subscription {args.get('sub')} not found")
            if args.get("rg") is not None and args["rg"].lower() != self.fake.resource_group.lower():
                raise ArmError(
                    404, "ResourceGroupNotFound", f"Resource group '{args['rg']}' could not be found."
                )
            fault = self.fake._take_fault(method, parts.path)
            if fault is not None:
                raise fault
            body = json.loads(raw) if raw else {}
            self._exchange = (handler, json.loads(raw) if raw else None)
            getattr(self, "_" + handler)(args, query, body, parts.path)
        except ArmError as err:
            self._error(err)

    # --- responses -------------------------------------------------------------------------------------

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> int:
        # Recorded before the client can see the answer, so a test reading the log right after a call
        # always finds that call in it.
        self.fake.requests.append(Recorded(*self._request, status=status))
        handler, request = getattr(self, "_exchange", ("", None))
        if handler and status < 300:
            self.fake.exchanges.append(Exchange(handler, request, status, body))
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ms-request-id", "fake")
        self.end_headers()
        self.wfile.write(data)
        return status

    def _error(self, err: ArmError) -> None:
        headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else {}
        self._send(err.status, {"error": {"code": err.code, "message": err.message}}, headers)

    def _lro(self, status: int, op: Operation, body: Any = None, *, location_only: bool = False) -> int:
        """Initial response of a long-running operation, in the style the operation was given."""
        headers = {"Retry-After": "0"}
        if op.style == "location" or location_only:
            headers["Location"] = self.fake.operation_url(op, monitor=True)
        else:
            headers["Azure-AsyncOperation"] = self.fake.operation_url(op, monitor=False)
        return self._send(status, body, headers)

    # --- routes ----------------------------------------------------------------------------------------

    def _skus(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        location = parse_filter_value(query.get("$filter", ""), "location")
        with self.fake.state.lock:
            skus = [
                s
                for s in self.fake.state.skus
                if location is None or location.lower() in [loc.lower() for loc in s["locations"]]
            ]
        return self._send(200, self.fake.page(skus, query, path))

    def _operation(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        op = self.fake.state.poll(args["op"])
        monitor = query.get("monitor") == "true"
        error = {"code": op.error[0], "message": op.error[1]} if op.error else None
        if not monitor:
            doc: dict[str, Any] = {"name": op.id, "status": op.status, "startTime": iso(0)}
            if op.status == "Failed":
                doc["error"] = error
            return self._send(200, doc, {"Retry-After": "0"})
        if op.status == "InProgress":
            return self._send(
                202, None, {"Location": self.fake.operation_url(op, monitor=True), "Retry-After": "0"}
            )
        if op.status == "Failed":
            return self._send(409, {"error": error})
        return self._send(200, op.result() if op.result is not None else None)

    def _list_scale_sets(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        with self.fake.state.lock:
            items = [self.fake.scale_set_json(ss) for ss in self.fake.state.scale_sets.values()]
        return self._send(200, self.fake.page(items, query, path))

    def _get_scale_set(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        with self.fake.state.lock:
            return self._send(200, self.fake.scale_set_json(self.fake.state.scale_set(args["ss"])))

    def _patch_scale_set(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        state = self.fake.state
        ss, op = state.update_scale_set(args["ss"], body, self.headers.get("If-Match"))
        op.result = lambda: self.fake.scale_set_json(ss)
        with state.lock:
            return self._lro(200, op, self.fake.scale_set_json(ss))

    def _put_scale_set(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        ss, op, created = self.fake.state.create_scale_set(args["ss"], body)
        op.result = lambda: self.fake.scale_set_json(ss)
        with self.fake.state.lock:
            return self._lro(201 if created else 200, op, self.fake.scale_set_json(ss))

    def _delete_instances(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        op = self.fake.state.delete_instances(args["ss"], [str(i) for i in body.get("instanceIds") or []])
        return self._lro(202, op, location_only=op.style == "location")

    def _list_scale_set_vms(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        state = self.fake.state
        expand = query.get("$expand") == "instanceView"
        with state.lock:
            ss = state.scale_set(args["ss"])
            if ss.orchestration != "Uniform":
                raise ArmError(
                    400, "OperationNotAllowed", "use the virtualMachines list for a Flexible scale set"
                )
            items = [
                self.fake.vm_json(vm, expand=expand)
                for _, vm in sorted(ss.vms.items(), key=lambda kv: int(kv[0]))
            ]
        return self._send(200, self.fake.page(items, query, path))

    def _get_scale_set_vm(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        state = self.fake.state
        with state.lock:
            vm = state.scale_set(args["ss"]).vms.get(args["id"])
            if vm is None:
                raise ArmError(404, "NotFound", f"instance {args['id']} not found")
            return self._send(200, self.fake.vm_json(vm, expand=query.get("$expand") == "instanceView"))

    def _list_vms(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        wanted = parse_filter_value(query.get("$filter", ""), "virtualMachineScaleSet/id")
        expand = query.get("$expand") == "instanceView"
        with self.fake.state.lock:
            items = [self.fake.vm_json(vm, expand=expand) for vm in self.fake.state.flexible_vms(wanted)]
        return self._send(200, self.fake.page(items, query, path))

    def _get_vm(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        with self.fake.state.lock:
            vm = self.fake.state.vms.get(args["vm"])
            if vm is None:
                raise ArmError(
                    404,
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.Compute/virtualMachines/{args['vm']}' was not found.",
                )
            return self._send(200, self.fake.vm_json(vm, expand=query.get("$expand") == "instanceView"))

    def _put_vm(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        vm, op, created = self.fake.state.create_vm(args["vm"], body)
        op.result = lambda: self.fake.vm_json(vm)
        with self.fake.state.lock:
            return self._lro(201 if created else 200, op, self.fake.vm_json(vm))

    def _delete_vm(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        op = self.fake.state.delete_vm(args["vm"])
        if op is None:
            return self._send(204)
        return self._lro(202, op, location_only=op.style == "location")

    def _get_capacity_reservation_group(
        self, args: dict[str, str], query: dict[str, str], body: Any, path: str
    ) -> int:
        with self.fake.state.lock:
            group = check_group(self.fake.state.groups, args["group"])
            return self._send(200, self.fake.group_json(group, expand=query.get("$expand") == "instanceView"))

    def _list_capacity_reservations(
        self, args: dict[str, str], query: dict[str, str], body: Any, path: str
    ) -> int:
        with self.fake.state.lock:
            group = check_group(self.fake.state.groups, args["group"])
            items = [self.fake.reservation_json(group, r) for r in group.reservations.values()]
        return self._send(200, self.fake.page(items, query, path))

    def _prices(self, args: dict[str, str], query: dict[str, str], body: Any, path: str) -> int:
        if self.fake.prices_down:
            raise ArmError(503, "ServiceUnavailable", "the price sheet is unavailable")
        text = query.get("$filter", "")
        region = parse_filter_value(text, "armRegionName")
        service = parse_filter_value(text, "serviceName")
        price_type = parse_filter_value(text, "priceType")
        items = [
            i
            for i in self.fake.prices
            if (region is None or i["armRegionName"] == region)
            and (service is None or i["serviceName"] == service)
            and (price_type is None or i["type"] == price_type)
        ]
        skip = int(query.get("$skip", "0") or 0)
        size = self.fake.price_page_size
        page = items[skip : skip + size]
        next_link = None
        if skip + size < len(items):
            next_link = (
                f"{self.fake.url}/api/retail/prices?{urlencode({'$filter': text, '$skip': skip + size})}"
            )
        doc = {
            "BillingCurrency": "USD",
            "CustomerEntityId": "Default",
            "CustomerEntityType": "Retail",
            "Items": page,
            "NextPageLink": next_link,
            "Count": len(page),
        }
        return self._send(200, doc)
