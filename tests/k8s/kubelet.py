"""What the kubelet would do for pods, played through the API: confirm deletions, report pods running.

Nodes themselves are registered by ``cloud: simulated`` (its stand-in kubelets create the Node and report
Ready and GPUs through the status subresource). Without a kubelet a bound pod that is deleted, or evicted,
keeps its deletionTimestamp forever; a real kubelet stops its containers and confirms with a delete of
grace period 0, which is what this does.
"""

from __future__ import annotations

import threading
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError


class PodKubelet:
    """A thread that finishes pod deletions and marks bound pods Running, every ``interval`` seconds."""

    def __init__(self, api: kubernetes.client.ApiClient, *, interval: float = 0.2) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-kubelet", daemon=True)
        self.confirmed: list[str] = []

    def __enter__(self) -> PodKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (ApiException, HTTPError, OSError):
                continue  # the API server may be down on purpose; try again next round

    def step(self) -> None:
        """One pass over every pod in the cluster."""
        pods = self.core.list_pod_for_all_namespaces(_request_timeout=5).items
        for pod in pods:
            meta, spec = pod.metadata, pod.spec
            if meta.deletion_timestamp is not None:
                self._confirm_deleted(meta.namespace, meta.name)
            elif spec.node_name and pod.status.phase == "Pending":
                self._report_running(meta.namespace, meta.name)

    def _confirm_deleted(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=5)
            self.confirmed.append(f"{namespace}/{name}")
        except ApiException as err:
            if err.status != 404:
                raise

    def _report_running(self, namespace: str, name: str) -> None:
        status = {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [],
            }
        }
        try:
            self.core.patch_namespaced_pod_status(name, namespace, status, _request_timeout=5)
        except ApiException as err:
            if err.status not in (404, 409, 422):
                raise
