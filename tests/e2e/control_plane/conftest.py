"""tidal end to end on the real control plane: its own process, its own ServiceAccount, the real scheduler."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.harness import base_config
from tests.k8s.cluster import Objects, SimulatedCloud, install_tidal_rbac
from tests.k8s.control_plane import ControlPlane
from tests.k8s.kubelet import PodKubelet
from tests.k8s.tidal import Tidal, wait_until

_names = itertools.count(1)


@pytest.fixture(scope="session")
def objects(control_plane: ControlPlane) -> Objects:
    """Cluster-admin access, with tidal's RBAC from the chart installed once."""
    objs = Objects(control_plane.admin_client())
    install_tidal_rbac(objs)
    return objs


class Cluster:
    """One test's share of the control plane: a namespace, a simulated cloud, the tidal processes it ran."""

    def __init__(self, control_plane: ControlPlane, objects: Objects, folder: Path) -> None:
        self.control_plane = control_plane
        self.objects = objects
        self.folder = folder
        self.namespace = f"e2e-{next(_names)}"
        self.api = control_plane.admin_client()
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.state_file = folder / "cloud.json"
        self.tidals: list[Tidal] = []
        self.kubelet = PodKubelet(self.api)
        self.kubelet.__enter__()

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The e2e configuration (simulated cloud, short delays) sharing this test's cloud state file."""
        cfg = base_config(**overrides)
        cfg["simulated"] = {**cfg["simulated"], "stateFile": str(self.state_file)}
        cfg.setdefault("logFormat", "json")
        cfg["logFormat"] = overrides.get("logFormat", "json")
        cfg["logLevel"] = overrides.get("logLevel", "info")
        return cfg

    def cloud(self, config: dict[str, Any]) -> SimulatedCloud:
        return SimulatedCloud(config)

    def tidal(self, config: dict[str, Any], *, name: str = "tidal-0", once: bool = False) -> Tidal:
        """Start ``tidal run`` with this configuration, as tidal's ServiceAccount."""
        t = Tidal(self.control_plane, self.folder / name, config, name=name, once=once)
        self.tidals.append(t)
        return t.start()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"].get("namespace") is None and obj["kind"] not in ("Node", "Queue"):
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.namespace}}
        return self.objects.apply(obj)

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.namespace).items)

    def nodes(self) -> list[Any]:
        return list(self.core.list_node().items)

    def bound(self) -> list[Any]:
        return [p for p in self.pods() if p.spec.node_name]

    def wait_bound(self, count: int, timeout: float = 60.0) -> list[Any]:
        def enough() -> list[Any] | None:
            bound = self.bound()
            return bound if len(bound) >= count else None

        return list(wait_until(enough, timeout=timeout, what=f"{count} pods of {self.namespace} bound"))

    def logs(self) -> str:
        return "\n".join(f"--- {t.name}\n{t.output()[-6000:]}" for t in self.tidals)

    def close(self) -> None:
        for t in self.tidals:
            t.stop()
        self.kubelet.__exit__()
        # The namespace first: once it is terminating no controller may create a pod in it, so the pods
        # deleted next are not replaced by the Job or ReplicaSet controller, and the next test's tidal never
        # sees this test's pods pending.
        self.core.delete_namespace(self.namespace)
        deadline = time.monotonic() + 60
        while (left := self.pods()) and time.monotonic() < deadline:
            for pod in left:
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
            time.sleep(0.2)
        # Nodes are cluster-wide: the next test starts from an empty cluster and an empty cloud.
        for node in self.nodes():
            self.core.delete_node(node.metadata.name)
        self.api.close()


@pytest.fixture
def cluster(
    control_plane: ControlPlane, objects: Objects, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    c = Cluster(control_plane, objects, tmp_path)
    yield c
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(c.logs())
    c.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep
