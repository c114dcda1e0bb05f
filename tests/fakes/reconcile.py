"""Stand-ins for what a Controller reads and acts through, for tests that drive one reconcile at a time."""

from __future__ import annotations

from typing import Any

from autoscaler.model import Snapshot

T0_EPOCH = 1_795_168_800.0  # builders.T0 (2026-11-20T10:00:00Z), when the test objects were created


class StaticCluster:
    """The cluster as the controller reads it; a test replaces ``view`` between reconciles."""

    def __init__(self, view: Snapshot) -> None:
        self.view = view

    def snapshot(self) -> Snapshot:
        return self.view


class CallRecorder:
    """Actions and events, remembered instead of sent to an API server; ``fail`` makes an action raise.

    ``on_server`` is what the API server holds on each node (pod keys), for the fresh read before a Node
    is deleted (``workload_on``); a node it does not name holds nothing. ``registered`` names the Node of
    each instance (by providerID) the API server has, for ``node_for``."""

    def __init__(
        self,
        fail: dict[str, Exception] | None = None,
        on_server: dict[str, list[str]] | None = None,
        registered: dict[str, str] | None = None,
    ) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = dict(fail or {})
        self.on_server = dict(on_server or {})
        self.registered = dict(registered or {})

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args))
            if name in self.fail:
                raise self.fail[name]
            if name == "workload_on":
                return list(self.on_server.get(args[0], ()))
            if name == "node_for":
                return self.registered.get(args[0])
            return None

        return call

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]


class Clock:
    """Time the test moves by hand."""

    def __init__(self, now: float = T0_EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
