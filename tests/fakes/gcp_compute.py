"""The state and semantics behind the fake Compute Engine v1 REST API (HTTP lives in gcp_http).

Instances, zone operations, machine and accelerator types, instance templates and GKE's instance group
managers. Inserts and deletes are operations that go PENDING → RUNNING → DONE over ``operation_delay``
seconds; a stockout or quota failure arrives *inside* the finished operation (``error.errors[].code``,
``httpErrorStatusCode``), as in GCE. ``requestId`` is honoured: the same id returns the same operation and
never makes a second instance. Insert bodies are checked as GCE checks them (names, label syntax, GPUs
only on N1 within the count limit, GPU and Spot VMs must not live-migrate).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes import gcp_reservations
from tests.fakes.gcp_filters import FilterError, page, parse_filter
from tests.fakes.gcp_reservations import FakeReservation
from tests.fakes.gcp_rules import GceError, Rule, last, validate_insert

API = "https://www.googleapis.com/compute/v1"


def now_rfc3339() -> str:
    """The current time as GCE writes timestamps."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Operation:
    """One zone operation: its resource, what finishing it does, and the error it ends with."""

    resource: dict[str, Any]
    zone: str
    started: float
    on_done: Any = None
    error: tuple[str, int, str, list[dict[str, Any]] | None] | None = None
    finished: bool = False
    answer: dict[str, Any] = field(default_factory=dict)  # what the call that started it was answered


@dataclass
class ComputeState:
    """Everything the fake Compute Engine holds for one project."""

    project: str
    machine_types: dict[str, list[dict[str, Any]]]
    accelerator_types: dict[str, list[dict[str, Any]]]
    operation_delay: float = 0.05
    # What operations age by; a test that also drives the provider's clock makes their timing exact.
    clock: Callable[[], float] = time.monotonic
    page_cap: int = 500  # the most items one list page holds (GCE: 500)
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str], Operation] = field(default_factory=dict)
    request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reservations: dict[tuple[str, str], FakeReservation] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    inserts: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    changed: threading.Condition = field(init=False)
    _ids: Any = field(default_factory=lambda: itertools.count(4_100_000_000_000_000_001, 7919))

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    # --- helpers -------------------------------------------------------------------------------------

    def new_id(self) -> str:
        """A numeric-string id, as GCE gives every resource."""
        return str(next(self._ids))

    def zone_url(self, zone: str) -> str:
        """The zone's full resource URL."""
        return f"{API}/projects/{self.project}/zones/{zone}"

    def region(self, region: str) -> dict[str, Any]:
        """regions.get: the region and its zones (those of the project's machine types in it); 404 for a
        region none of them is in."""
        zones = sorted(z for z in self.machine_types if z.rsplit("-", 1)[0] == region)
        if not zones:
            raise GceError(
                404, "notFound", f"The resource 'projects/{self.project}/regions/{region}' was not found"
            )
        return {
            "kind": "compute#region",
            "id": self.new_id(),
            "name": region,
            "status": "UP",
            "zones": [self.zone_url(z) for z in zones],
            "selfLink": f"{API}/projects/{self.project}/regions/{region}",
        }

    def check_zone(self, zone: str) -> None:
        """404 for a zone the project does not have."""
        if zone not in self.machine_types:
            raise GceError(
                404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}' was not found"
            )

    def advance(self) -> None:
        """Move operations along the clock: PENDING → RUNNING → DONE (applying their effect once)."""
        with self.lock:
            now = self.clock()
            for op in self.operations.values():
                if op.finished:
                    continue
                elapsed = now - op.started
                if elapsed >= self.operation_delay:
                    self._finish(op)
                elif elapsed >= self.operation_delay / 2:
                    op.resource.update(status="RUNNING", progress=50, startTime=now_rfc3339())
            self.changed.notify_all()

    def _finish(self, op: Operation) -> None:
        op.finished = True
        op.resource.update(status="DONE", progress=100, endTime=now_rfc3339())
        if op.error is not None:
            code, status, message, details = op.error
            failure: dict[str, Any] = {"code": code, "message": message}
            if details:
                failure["errorDetails"] = copy.deepcopy(details)
            op.resource["error"] = {"errors": [failure]}
            op.resource["httpErrorStatusCode"] = status
            op.resource["httpErrorMessage"] = {403: "FORBIDDEN", 429: "TOO MANY REQUESTS"}.get(
                status, "SERVICE UNAVAILABLE"
            )
        if op.on_done is not None:
            op.on_done()

    def _operation(
        self,
        zone: str,
        kind: str,
        target: str,
        error: tuple[str, int, str, list[dict[str, Any]] | None] | None,
        on_done: Any,
    ) -> Operation:
        name = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"
        resource = {
            "kind": "compute#operation",
            "id": self.new_id(),
            "name": name,
            "zone": self.zone_url(zone),
            "operationType": kind,
            "targetLink": f"{self.zone_url(zone)}/instances/{target}",
            "targetId": self.new_id(),
            "status": "PENDING",
            "user": "tidal@example.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": now_rfc3339(),
            "selfLink": f"{self.zone_url(zone)}/operations/{name}",
        }
        op = Operation(resource, zone, self.clock(), on_done, error)
        # GCE answers the call that starts an operation with the operation not yet DONE, however fast it
        # then is; a repeated requestId gets the operation as it is now.
        op.answer = copy.deepcopy(resource)
        self.operations[(zone, name)] = op
        if self.operation_delay <= 0:
            self._finish(op)
        return op

    # --- instances -----------------------------------------------------------------------------------

    def insert(self, zone: str, body: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        """instances.insert: the operation (the same one again for a repeated requestId)."""
        with self.lock:
            self.check_zone(zone)
            if request_id:
                try:
                    uuid.UUID(request_id)
                except ValueError:
                    raise GceError(
                        400, "invalid", f"Invalid value for field 'requestId': '{request_id}'"
                    ) from None
                if request_id in self.request_ids:
                    return copy.deepcopy(self.operations[self.request_ids[request_id]].resource)
            mt, model, accel, count = validate_insert(
                body, self.machine_types[zone], self.accelerator_types[zone]
            )
            name = body["name"]
            if (zone, name) in self.instances:
                raise GceError(
                    409,
                    "alreadyExists",
                    f"The resource '{self.zone_url(zone)}/instances/{name}' already exists",
                )
            self.inserts += 1
            rule = next((r for r in self.rules if r.matches(mt["name"], zone, model, accel)), None)
            error: tuple[str, int, str, list[dict[str, Any]] | None] | None = None
            wanted = gcp_reservations.target(body)
            reservation = self.reservations.get((zone, wanted)) if wanted else None
            refused = gcp_reservations.refusal(reservation, wanted, body) if wanted else None
            if refused is not None:
                error = ("CONDITION_NOT_MET", 400, refused, None)
            elif rule is not None:
                if rule.remaining is not None:
                    rule.remaining -= 1
                error = (rule.code, rule.status, rule.message, rule.details)
            else:
                self.instances[(zone, name)] = self._instance(zone, body, mt, accel, count)
                if reservation is not None:
                    reservation.vms.add(name)
            key = (zone, name)

            def done() -> None:
                if key in self.instances and self.instances[key]["status"] == "PROVISIONING":
                    self.instances[key]["status"] = "RUNNING"

            op = self._operation(zone, "insert", name, error, done)
            if request_id:
                self.request_ids[request_id] = (zone, op.resource["name"])
            return copy.deepcopy(op.answer)

    def _instance(
        self, zone: str, body: dict[str, Any], mt: dict[str, Any], accel: str, count: int
    ) -> dict[str, Any]:
        vm = copy.deepcopy(body)
        url = self.zone_url(zone)
        vm.update(
            kind="compute#instance",
            id=self.new_id(),
            zone=url,
            machineType=f"{url}/machineTypes/{mt['name']}",
            status="PROVISIONING",
            creationTimestamp=now_rfc3339(),
            selfLink=f"{url}/instances/{body['name']}",
            cpuPlatform="Intel Broadwell",
        )
        built_in = mt.get("accelerators") or []
        if accel:
            vm["guestAccelerators"] = [
                {"acceleratorType": f"{url}/acceleratorTypes/{accel}", "acceleratorCount": count}
            ]
        elif built_in:
            vm["guestAccelerators"] = [
                {
                    "acceleratorType": f"{url}/acceleratorTypes/{a['guestAcceleratorType']}",
                    "acceleratorCount": a["guestAcceleratorCount"],
                }
                for a in built_in
            ]
        if vm.get("metadata") is not None:
            vm["metadata"]["fingerprint"] = "c2lnbmVk"
        return vm

    def delete(self, zone: str, name: str, request_id: str | None) -> dict[str, Any]:
        """instances.delete: an operation that removes the VM when DONE; 404 when there is none."""
        with self.lock:
            self.check_zone(zone)
            if request_id and request_id in self.request_ids:
                return copy.deepcopy(self.operations[self.request_ids[request_id]].resource)
            vm = self.instances.get((zone, name))
            if vm is None:
                raise GceError(
                    404, "notFound", f"The resource '{self.zone_url(zone)}/instances/{name}' was not found"
                )
            vm["status"] = "STOPPING"

            def gone() -> None:
                self.instances.pop((zone, name), None)
                for r in self.reservations.values():
                    r.vms.discard(name)

            op = self._operation(zone, "delete", name, None, gone)
            if request_id:
                self.request_ids[request_id] = (zone, op.resource["name"])
            return copy.deepcopy(op.answer)

    def get_instance(self, zone: str, name: str) -> dict[str, Any]:
        """instances.get."""
        with self.lock:
            self.check_zone(zone)
            vm = self.instances.get((zone, name))
            if vm is None:
                raise GceError(
                    404, "notFound", f"The resource '{self.zone_url(zone)}/instances/{name}' was not found"
                )
            return copy.deepcopy(vm)

    def list_instances(self, zone: str | None, query: dict[str, str]) -> dict[str, Any]:
        """instances.list (one zone) or instances.aggregatedList (zone None): filtered, one page."""
        with self.lock:
            try:
                keep = parse_filter(query.get("filter", ""))
                vms = sorted(
                    (vm for (z, _), vm in self.instances.items() if (zone is None or z == zone) and keep(vm)),
                    key=lambda vm: (vm["zone"], vm["name"]),
                )
                chunk, token = page(
                    vms, str(min(int(query.get("maxResults") or 500), self.page_cap)), query.get("pageToken")
                )
            except FilterError as err:
                raise GceError(400, "invalid", str(err)) from None
            chunk = copy.deepcopy(chunk)
        if zone is not None:
            out: dict[str, Any] = {
                "kind": "compute#instanceList",
                "id": f"projects/{self.project}/zones/{zone}/instances",
                "items": chunk,
            }
        else:
            items: dict[str, Any] = {
                f"zones/{z}": {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none"}}
                for z in self.machine_types
            }
            for vm in chunk:
                scoped = items.setdefault(f"zones/{last(vm['zone'])}", {})
                scoped.pop("warning", None)
                scoped.setdefault("instances", []).append(vm)
            out = {
                "kind": "compute#instanceAggregatedList",
                "id": f"projects/{self.project}/aggregated/instances",
                "items": items,
            }
        if token:
            out["nextPageToken"] = token
        return out

    # --- operations ----------------------------------------------------------------------------------

    def get_operation(self, zone: str, name: str, wait: float = 0.0) -> dict[str, Any]:
        """zoneOperations.get, or .wait (``wait`` seconds at most for DONE)."""
        deadline = time.monotonic() + wait
        with self.lock:
            self.check_zone(zone)
            op = self.operations.get((zone, name))
            if op is None:
                raise GceError(
                    404, "notFound", f"The resource '{self.zone_url(zone)}/operations/{name}' was not found"
                )
            while not op.finished and time.monotonic() < deadline:
                self.changed.wait(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
                self.advance()
            return copy.deepcopy(op.resource)

    # --- catalog, templates, groups -------------------------------------------------------------------

    def listing(self, kind: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        """machineTypes.list or acceleratorTypes.list of a zone, filtered, one page."""
        self.check_zone(zone)
        source = self.machine_types if kind == "machineTypes" else self.accelerator_types
        try:
            keep = parse_filter(query.get("filter", ""))
            chunk, token = page(
                [r for r in source[zone] if keep(r)], query.get("maxResults"), query.get("pageToken")
            )
        except FilterError as err:
            raise GceError(400, "invalid", str(err)) from None
        out: dict[str, Any] = {
            "kind": f"compute#{kind[:-1]}List",
            "id": f"projects/{self.project}/zones/{zone}/{kind}",
            "items": chunk,
        }
        if token:
            out["nextPageToken"] = token
        return out

    def template(self, path: str) -> dict[str, Any]:
        """instanceTemplates.get / regionInstanceTemplates.get by resource path."""
        found = self.templates.get(path)
        if found is None:
            raise GceError(404, "notFound", f"The resource '{path}' was not found")
        return copy.deepcopy(found)

    def list_reservations(self, zone: str) -> dict[str, Any]:
        """reservations.list of a zone."""
        with self.lock:
            self.check_zone(zone)
            items = [
                r.resource(self.project, API, str(4_200_000_000_000_000_000 + i))
                for i, (key, r) in enumerate(sorted(self.reservations.items()))
                if key[0] == zone
            ]
        return {
            "kind": "compute#reservationList",
            "id": f"projects/{self.project}/zones/{zone}/reservations",
            "items": items,
            "selfLink": f"{self.zone_url(zone)}/reservations",
        }

    def group_list(self, zone: str) -> dict[str, Any]:
        """instanceGroupManagers.list of a zone."""
        self.check_zone(zone)
        return {
            "kind": "compute#instanceGroupManagerList",
            "id": "igm",
            "items": copy.deepcopy(self.groups.get(zone, [])),
        }
