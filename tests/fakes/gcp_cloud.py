"""A fake GCP project for tests: Compute Engine and the Cloud Billing Catalog on local ports.

    with FakeGcp() as gcp:
        template = gcp.add_node_pool("e2e", "tidal")
        provider = GcpProvider(config_from_mapping(gcp.config(template=template)))

Test hooks inject what GCE does to a real launch: stockouts and quota errors inside the operation,
HTTP 429 rate limiting, Spot preemption.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, Self

from tests.fakes.gcp_billing import BillingState
from tests.fakes.gcp_compute import API, ComputeState
from tests.fakes.gcp_fixtures import REGION, zone_catalog
from tests.fakes.gcp_http import FakeHttpServer, Fault, billing_routes, compute_routes
from tests.fakes.gcp_reservations import FakeReservation
from tests.fakes.gcp_rules import Rule

PROJECT = "tidal-test"
ZONES = ("us-central1-a", "us-central1-b")
STOCKOUT_MESSAGE = (
    "The zone '{zone}' does not have enough resources available to fulfill the request. "
    "Try a different zone, or try again later."
)


def pool_labels(pool: str, family: str = "e2") -> dict[str, str]:
    """The node labels GKE gives a node pool's nodes."""
    return {
        "cloud.google.com/gke-boot-disk": "pd-balanced",
        "cloud.google.com/gke-container-runtime": "containerd",
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/machine-family": family,
        "cloud.google.com/private-node": "false",
    }


def kube_env(cluster: str, labels: dict[str, str], taints: str = "", arch: str = "amd64") -> str:
    """A GKE kube-env as node pool templates carry it (shortened; certificates are placeholders)."""
    label_text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    release = "https://storage.googleapis.com/gke-release/kubernetes/release/v1.30.5-gke.1014001"
    taint_flag = f" --register-with-taints={taints}" if taints else ""
    return "\n".join(
        [
            'ALLOCATE_NODE_CIDRS: "true"',
            "AUTOSCALER_ENV_VARS: kube_reserved=cpu=1060m,memory=1019Mi,ephemeral-storage=41Gi;"
            f"node_labels={label_text};node_taints={taints};os=linux;os_distribution=cos;"
            "evictionHard=memory.available=100Mi,nodefs.available=10%",
            "CA_CERT: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
            "CLUSTER_IP_RANGE: 10.4.0.0/14",
            f"CLUSTER_NAME: {cluster}",
            "DNS_SERVER_IP: 10.8.0.10",
            "KUBELET_ARGS: --v=2 --cloud-provider=external --cert-dir=/var/lib/kubelet/pki/ "
            f"--kubeconfig=/var/lib/kubelet/kubeconfig --max-pods=110 --node-labels={label_text}{taint_flag} "
            "--volume-plugin-dir=/home/kubernetes/flexvolume",
            "KUBERNETES_MASTER_NAME: 10.128.0.2",
            f"KUBE_MANIFESTS_TAR_URL: {release}/kubernetes-manifests.tar.gz",
            f"NODE_LABELS: {label_text}",
            f"NODE_TAINTS: {taints}",
            f"SERVER_BINARY_TAR_URL: {release}/kubernetes-server-linux-{arch}.tar.gz",
            "SERVER_BINARY_TAR_HASH: 5f1e" + "0" * 124,
            "ZONE: us-central1-a",
            "",
        ]
    )


def gke_template(
    project: str, cluster: str, pool: str, *, name: str, taints: str = "", gpu: bool = False
) -> dict[str, Any]:
    """An instance template as GKE creates it for a node pool (a T4 pool when ``gpu``)."""
    labels = pool_labels(pool, "n1" if gpu else "e2")
    if gpu:
        labels |= {
            "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
            "cloud.google.com/gke-gpu-driver-version": "default",
        }
    text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    properties: dict[str, Any] = {
        "machineType": "n1-standard-4" if gpu else "e2-medium",
        "canIpForward": True,
        "tags": {"items": [f"gke-{cluster}-4f1d2c3b-node"]},
        "disks": [
            {
                "type": "PERSISTENT",
                "mode": "READ_WRITE",
                "deviceName": "persistent-disks-0",
                "boot": True,
                "autoDelete": True,
                "initializeParams": {
                    "sourceImage": f"{API}/projects/gke-node-images/global/images/gke-1305-gke1014001-cos-113-18244-151-50-c-pre",
                    "diskSizeGb": "100",
                    "diskType": "pd-balanced",
                },
            }
        ],
        "networkInterfaces": [
            {
                "network": f"{API}/projects/{project}/global/networks/default",
                "subnetwork": f"{API}/projects/{project}/regions/{REGION}/subnetworks/default",
                "aliasIpRanges": [
                    {"ipCidrRange": "/24", "subnetworkRangeName": f"gke-{cluster}-pods-4f1d2c3b"}
                ],
            }
        ],
        "metadata": {
            "items": [
                {"key": "kube-env", "value": kube_env(cluster, labels, taints)},
                {"key": "kube-labels", "value": text},
                {"key": "cluster-name", "value": cluster},
                {"key": "cluster-location", "value": REGION},
                {"key": "cluster-uid", "value": "4f1d2c3b0a9e4d7c8b6a5f4e3d2c1b0a"},
                {"key": "disable-legacy-endpoints", "value": "true"},
                {"key": "configure-sh", "value": "#!/bin/bash\n# GKE node bootstrap"},
            ]
        },
        "serviceAccounts": [
            {
                "email": f"gke-nodes@{project}.iam.gserviceaccount.com",
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            }
        ],
        "scheduling": {
            "automaticRestart": True,
            "onHostMaintenance": "TERMINATE" if gpu else "MIGRATE",
            "provisioningModel": "STANDARD",
        },
        "labels": {"goog-gke-node": "", "goog-k8s-cluster-name": cluster, "goog-k8s-node-pool-name": pool},
        "shieldedInstanceConfig": {
            "enableSecureBoot": False,
            "enableVtpm": True,
            "enableIntegrityMonitoring": True,
        },
    }
    if gpu:
        properties["guestAccelerators"] = [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]
    return {
        "kind": "compute#instanceTemplate",
        "id": "7700000000000000001",
        "name": name,
        "properties": properties,
    }


class FakeGcp:
    """Compute Engine and Cloud Billing fakes for one project, with test hooks."""

    def __init__(
        self,
        *,
        project: str = PROJECT,
        zones: tuple[str, ...] = ZONES,
        operation_delay: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        types, accels = zone_catalog(project, list(zones))
        self.project, self.zones = project, zones
        self.compute = ComputeState(project, types, accels, operation_delay=operation_delay, clock=clock)
        self.billing = BillingState()
        self.compute_server = FakeHttpServer(
            compute_routes(self.compute),
            prefix=f"/compute/v1/projects/{project}",
            before=self.compute.advance,
        )
        self.billing_server = FakeHttpServer(billing_routes(self.billing))

    def __enter__(self) -> Self:
        self.compute_server.start()
        self.billing_server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.compute_server.stop()
        self.billing_server.stop()

    # --- set-up --------------------------------------------------------------------------------------

    def add_node_pool(
        self, cluster: str, pool: str, *, regional: bool = False, taints: str = "", gpu: bool = False
    ) -> str:
        """A GKE node pool: its instance template and a managed instance group per zone; returns the
        template's path."""
        name = f"gke-{cluster}-{pool}-4f1d2c3b"[:63]
        where = f"regions/{REGION}" if regional else "global"
        path = f"projects/{self.project}/{where}/instanceTemplates/{name}"
        self.compute.templates[path] = gke_template(
            self.project, cluster, pool, name=name, taints=taints, gpu=gpu
        )
        for zone in self.zones:
            self.compute.groups.setdefault(zone, []).append(
                {
                    "kind": "compute#instanceGroupManager",
                    "id": self.compute.new_id(),
                    "name": f"{name}-grp",
                    "zone": f"{API}/projects/{self.project}/zones/{zone}",
                    "instanceTemplate": f"{API}/{path}",
                    "targetSize": 0,
                    "baseInstanceName": name,
                }
            )
        return path

    def config(
        self, *, template: str | None = None, node_pool: str | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """A tidal configuration for this project; ``gcp=`` entries are merged into the gcp section."""
        gcp: dict[str, Any] = {
            "project": self.project,
            "endpoint": self.compute_server.url,
            "billingEndpoint": self.billing_server.url,
            "pollInterval": "20ms",
            "operationTimeout": "10s",
            "requestTimeout": "5s",
        }
        if template is not None:
            gcp["instanceTemplate"] = template
        if node_pool is not None:
            gcp["nodePool"] = {"name": node_pool}
        gcp.update(overrides.pop("gcp", {}))
        return {
            "cloud": "gcp",
            "region": REGION,
            "zones": list(self.zones),
            "clusterName": "e2e",
            "gcp": gcp,
            **overrides,
        }

    def add_reservation(
        self, name: str, zone: str, machine_type: str, count: int, **kw: Any
    ) -> FakeReservation:
        """A reservation of ``count`` VMs of ``machine_type`` in ``zone`` (``specific_required``,
        ``accelerators``, ``status``, ``delete_at`` as GCE names them)."""
        with self.compute.lock:
            found = self.compute.reservations[(zone, name)] = FakeReservation(
                name, zone, machine_type, count, **kw
            )
        return found

    def delete_reservation(self, name: str, zone: str) -> None:
        """The reservation is deleted (its VMs keep running, as on-demand VMs)."""
        with self.compute.lock:
            self.compute.reservations.pop((zone, name), None)

    # --- what GCE does -------------------------------------------------------------------------------

    def stockout(
        self, *, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED", times: int | None = None, **match: Any
    ) -> None:
        """Matching inserts (machine_type, zone, provisioning_model, accelerator) fail inside the operation."""
        zone = match.get("zone") or "the zone"
        self.compute.rules.append(
            Rule(code, 503, STOCKOUT_MESSAGE.format(zone=zone), remaining=times, **match)
        )

    def quota(self, metric: str = "NVIDIA_T4_GPUS", *, times: int | None = None, **match: Any) -> None:
        """Matching inserts fail inside the operation with QUOTA_EXCEEDED for ``metric``."""
        message = f"Quota '{metric}' exceeded.  Limit: 0.0 in region {REGION}."
        # As GCE sends it: the quota's metric and region in errorDetails[].quotaInfo as well.
        info = {
            "metricName": f"compute.googleapis.com/{metric.lower()}",
            "limitName": f"{metric.replace('_', '-')}-per-project-region",
            "dimensions": {"region": REGION},
            "limit": 0,
        }
        details = [{"quotaInfo": info}]
        self.compute.rules.append(
            Rule("QUOTA_EXCEEDED", 403, message, remaining=times, details=details, **match)
        )

    def throttle(self, method: str | None = None, *, count: int = 1, retry_after: int = 7) -> None:
        """The next ``count`` calls of ``method`` get HTTP 429 rateLimitExceeded."""
        self.compute_server.faults.append(
            Fault(429, "rateLimitExceeded", "Rate Limit Exceeded", method, count, retry_after)
        )

    def lose_answer(self, method: str, *, count: int = 1) -> None:
        """The next ``count`` calls of ``method`` are carried out, but their answer is lost on the way:
        the client sees HTTP 503 (and, for an insert, retries it with the same requestId)."""
        self.compute_server.faults.append(
            Fault(503, "backendError", "The service is currently unavailable.", method, count, lost=True)
        )

    def capacity_back(self) -> None:
        """Every injected stockout and quota failure is over."""
        with self.compute.lock:
            self.compute.rules.clear()

    def preempt(self, name: str) -> None:
        """Preempt a Spot VM: deleted (instanceTerminationAction DELETE) or TERMINATED (STOP)."""
        with self.compute.lock:
            key = next(k for k in self.compute.instances if k[1] == name)
            vm = self.compute.instances[key]
            if (vm.get("scheduling") or {}).get("instanceTerminationAction") == "DELETE":
                del self.compute.instances[key]
            else:
                vm["status"] = "TERMINATED"

    def instances(self) -> list[dict[str, Any]]:
        """Every VM the fake holds, as GCE would return it."""
        self.compute.advance()
        with self.compute.lock:
            return [copy.deepcopy(vm) for vm in self.compute.instances.values()]


def make_provider(
    fake: FakeGcp,
    /,
    *,
    clock: Any = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    template: str | None = None,
    **config: Any,
) -> Any:
    """A GcpProvider built from ``fake.config(...)`` the way the daemon builds it (a node pool template is
    added when none is given)."""
    from autoscaler.config.options import config_from_mapping
    from providers.gcp import GcpProvider

    if template is None and "node_pool" not in config:
        template = fake.add_node_pool("e2e", "tidal")
    cfg = config_from_mapping(fake.config(template=template, **config), source="test")
    return GcpProvider(cfg, clock=clock or time.time, monotonic=monotonic, sleep=sleep)
