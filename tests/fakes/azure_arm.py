"""A local HTTPS fake of ARM ``Microsoft.Compute`` (and the Retail Prices API) for the unmodified Azure SDK.

    with FakeArm(tmp_path) as arm:
        arm.state.add_scale_set("aks-t4-12345678-vmss", "Standard_NC4as_T4_v3")
        client = ComputeManagementClient(FakeCredential(), arm.subscription, base_url=arm.url,
                                         connection_verify=str(arm.cert), polling_interval=0)

Every route names the RBAC action ARM checks for it, and every request is recorded with that action, so a
test can compare what the code did with the role definition. Long-running operations answer in both ARM
styles (Azure-AsyncOperation with a status body; Location returning 202 until done) and always send
Retry-After. Faults: 429 with Retry-After, synchronous ARM errors, and allocation failures inside operations.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlencode

from tests.fakes.azure_auth import make_certificate
from tests.fakes.azure_catalog import price_items
from tests.fakes.azure_compute import ComputeState
from tests.fakes.azure_http import ArmHandler, Exchange, Recorded, iso
from tests.fakes.azure_model import ArmError, FakeScaleSet, FakeVM, Operation
from tests.fakes.azure_reservations import FakeCapacityReservation, FakeGroup, group_json, reservation_json

SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
RESOURCE_GROUP = "MC_tidal-rg_tidal_eastus"


@dataclass
class _Fault:
    method: str
    path_contains: str
    error: ArmError
    remaining: int


class FakeArm:
    """The fake's test-facing object: lifecycle, state, faults, request log and price fixture."""

    def __init__(
        self,
        cert_dir: Path,
        *,
        subscription: str = SUBSCRIPTION,
        resource_group: str = RESOURCE_GROUP,
        location: str = "eastus",
        price_page_size: int = 100,
    ) -> None:
        self.cert, self._key = make_certificate(cert_dir)
        self.subscription = subscription
        self.resource_group = resource_group
        self.state = ComputeState(subscription, resource_group, location)
        self.prices: list[dict[str, Any]] = price_items(location)
        self.price_page_size = price_page_size
        self.prices_down = False
        self.requests: list[Recorded] = []
        self.exchanges: list[Exchange] = []  # bodies sent and answered, for the shape checks
        self.page_size = 100
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Serve HTTPS on 127.0.0.1:<free port> in a daemon thread."""
        if self._server is None:
            handler = type("BoundArmHandler", (ArmHandler,), {"fake": self})
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.cert, self._key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-arm", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeArm is not running")
        return f"https://127.0.0.1:{self._server.server_port}"

    # --- faults and inspection -------------------------------------------------------------------------

    def throttle(self, method: str, path_contains: str, retry_after: int = 7, count: int = 1) -> None:
        """Answer the next ``count`` matching requests with 429 and ``Retry-After``."""
        error = ArmError(429, "TooManyRequests", "The request is being throttled.", retry_after)
        self.fail_request(method, path_contains, error, count)

    def fail_request(self, method: str, path_contains: str, error: ArmError, count: int = 1) -> None:
        """Answer the next ``count`` matching requests with a synchronous ARM error."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), path_contains, error, count))

    def actions(self) -> set[str]:
        """The RBAC actions of every ARM request served so far."""
        return {r.action for r in self.requests if r.action}

    def calls(self, method: str, path_contains: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and path_contains in r.path]

    def _take_fault(self, method: str, path: str) -> ArmError | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.method == method and fault.path_contains in path:
                    fault.remaining -= 1
                    return fault.error
        return None

    # --- rendering -------------------------------------------------------------------------------------

    def rg_path(self) -> str:
        group = f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
        return f"{group}/providers/Microsoft.Compute"

    def scale_set_json(self, ss: FakeScaleSet) -> dict[str, Any]:
        props: dict[str, Any] = {
            "provisioningState": ss.provisioning,
            "orchestrationMode": ss.orchestration,
            "virtualMachineProfile": ss.profile,
            "uniqueId": f"unique-{ss.name}",
            "timeCreated": iso(0),
        }
        if ss.orchestration == "Uniform":
            props.update(overprovision=False, upgradePolicy={"mode": "Manual"}, singlePlacementGroup=False)
        else:
            props["platformFaultDomainCount"] = 1
        capacity = ss.capacity if ss.orchestration == "Uniform" else len(self.state.flexible_vms(ss.name))
        body: dict[str, Any] = {
            "id": f"{self.rg_path()}/virtualMachineScaleSets/{ss.name}",
            "name": ss.name,
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": self.state.location,
            "tags": ss.tags,
            "etag": ss.etag,
            "sku": {"name": ss.size, "tier": "Standard", "capacity": capacity},
            "properties": props,
        }
        if ss.zones:
            body["zones"] = list(ss.zones)
        if ss.identity:
            body["identity"] = ss.identity
        return body

    def group_json(self, group: FakeGroup, *, expand: bool) -> dict[str, Any]:
        vm_path = f"{self.rg_path()}/virtualMachines"
        return group_json(group, self.rg_path(), self.state.location, vm_path, expand=expand)

    def reservation_json(self, group: FakeGroup, r: FakeCapacityReservation) -> dict[str, Any]:
        return reservation_json(group, r, self.rg_path(), self.state.location)

    def _instance_view(self, vm: FakeVM) -> dict[str, Any]:
        return {
            "statuses": [
                {"code": f"ProvisioningState/{vm.provisioning.lower()}", "level": "Info"},
                {"code": f"PowerState/{vm.power}", "level": "Info"},
            ]
        }

    def vm_json(self, vm: FakeVM, *, expand: bool = False) -> dict[str, Any]:
        props: dict[str, Any] = {
            "provisioningState": vm.provisioning,
            "vmId": vm.vm_id,
            "timeCreated": iso(vm.created),
            "hardwareProfile": {"vmSize": vm.size},
            "osProfile": {"computerName": vm.computer_name, "adminUsername": "azureuser"},
        }
        if vm.instance_id:
            ss = self.state.scale_sets[vm.scale_set]
            body: dict[str, Any] = {
                "id": f"{self.rg_path()}/virtualMachineScaleSets/{vm.scale_set}"
                f"/virtualMachines/{vm.instance_id}",
                "name": vm.name,
                "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
                "instanceId": vm.instance_id,
                "sku": {"name": vm.size, "tier": "Standard"},
                "tags": ss.tags,  # Uniform instances carry their scale set's tags
            }
            props["latestModelApplied"] = True
        else:
            sent = vm.body.get("properties") or {}
            props.update(
                {
                    k: sent[k]
                    for k in (
                        "priority",
                        "evictionPolicy",
                        "billingProfile",
                        "storageProfile",
                        "capacityReservation",
                    )
                    if k in sent
                }
            )
            props["virtualMachineScaleSet"] = {
                "id": f"{self.rg_path()}/virtualMachineScaleSets/{vm.scale_set}"
            }
            body = {
                "id": f"{self.rg_path()}/virtualMachines/{vm.name}",
                "name": vm.name,
                "type": "Microsoft.Compute/virtualMachines",
                "tags": vm.tags,
            }
        if expand:
            props["instanceView"] = self._instance_view(vm)
        body.update(location=self.state.location, properties=props)
        if vm.zone:
            body["zones"] = [vm.zone]
        return body

    def operation_url(self, op: Operation, *, monitor: bool) -> str:
        path = (
            f"/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/{self.state.location}"
        )
        query = "api-version=2026-04-01" + ("&monitor=true" if monitor else "")
        return f"{self.url}{path}/operations/{op.id}?{query}"

    def page(self, items: list[Any], query: dict[str, str], path: str) -> dict[str, Any]:
        """An ARM list page with ``nextLink`` when more items follow."""
        start = int(query.get("$skiptoken", "0") or 0)
        body: dict[str, Any] = {"value": items[start : start + self.page_size]}
        if start + self.page_size < len(items):
            rest = {k: v for k, v in query.items() if k != "$skiptoken"}
            body["nextLink"] = f"{self.url}{path}?{urlencode({**rest, '$skiptoken': start + self.page_size})}"
        return body
