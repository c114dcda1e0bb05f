"""Every change the API server made to Nodes and to one namespace's pods, in the order it made them.

Each event carries the object's resourceVersion, which the API server takes from etcd's one revision counter:
comparing them orders writes to different objects exactly, where polling would see two quick writes at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError


@dataclass(frozen=True)
class Change:
    revision: int
    kind: str  # Node or Pod
    type: str  # ADDED, MODIFIED, DELETED
    obj: Any


class History:
    """Watches Nodes and the pods of ``namespace`` from now until ``stop()``."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.namespace = namespace
        self.changes: list[Change] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._follow, args=("Node",), daemon=True),
            threading.Thread(target=self._follow, args=("Pod",), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _follow(self, kind: str) -> None:
        # The watch learns the type it decodes into from the list function itself, so pass that unwrapped.
        list_fn, args = (
            (self.core.list_node, ())
            if kind == "Node"
            else (self.core.list_namespaced_pod, (self.namespace,))
        )
        version = list_fn(*args).metadata.resource_version
        while not self._stop.is_set():
            try:
                for event in kubernetes.watch.Watch().stream(
                    list_fn, *args, resource_version=version, timeout_seconds=2, _request_timeout=5
                ):
                    if event["type"] == "ERROR":  # too old a revision: nothing a test waits on is lost
                        version = list_fn(*args).metadata.resource_version
                        break
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    with self._lock:
                        self.changes.append(Change(int(version), kind, event["type"], obj))
                    if self._stop.is_set():
                        return
            except (ApiException, HTTPError, OSError):
                continue

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def of(self, kind: str, name: str) -> list[Change]:
        """The changes to one object, in revision order."""
        with self._lock:
            found = [c for c in self.changes if c.kind == kind and c.obj.metadata.name == name]
        return sorted(found, key=lambda c: c.revision)

    def first(self, kind: str, name: str, test: Any) -> int | None:
        """The revision of the first change to the object after which ``test(obj)`` held."""
        return next((c.revision for c in self.of(kind, name) if test(c)), None)
