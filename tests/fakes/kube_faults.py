"""Injectable request failures for the fake API server."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

_DEFAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "The server is currently unable to handle the request (injected fault)",
    504: "Timeout: request did not complete within the allowed duration (injected fault)",
}


@dataclass
class Fault:
    """Fail the next `count` matching requests with HTTP `status` and a `Status` body.

    `verbs`: upper-case entries are HTTP methods ("GET", "PUT"), lower-case ones Kubernetes verbs ("list",
    "watch", "create", "deletecollection"); None matches any request. `resource`: a plural ("pods") matches the
    resource and its subresources, "pods/eviction" only that subresource; None matches any path.
    """

    status: int
    count: int = 1
    verbs: frozenset[str] | None = None
    resource: str | None = None
    retry_after: float | None = None
    message: str | None = None
    hits: int = 0

    @property
    def remaining(self) -> int:
        """How many more requests this fault will fail."""
        return self.count - self.hits

    def matches(self, method: str, verb: str | None, resource: str | None, subresource: str | None) -> bool:
        """Whether a request with these attributes should fail."""
        if self.verbs is not None and method not in self.verbs and (verb is None or verb not in self.verbs):
            return False
        if self.resource is None:
            return True
        if resource is None:
            return False
        return self.resource in (resource, f"{resource}/{subresource}" if subresource else resource)

    def describe(self) -> str:
        """The Status message sent with this fault."""
        return self.message or _DEFAULT_MESSAGES.get(self.status, f"injected fault (HTTP {self.status})")


class FaultQueue:
    """Pending faults, consumed first-match-first by request-handling threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def push(
        self,
        status: int,
        count: int = 1,
        verbs: Iterable[str] | None = None,
        resource: str | None = None,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> Fault:
        """Queue a fault; returns it so a test can check `fault.hits` afterwards."""
        fault = Fault(
            status, count, frozenset(verbs) if verbs is not None else None, resource, retry_after, message
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Drop every pending fault."""
        with self._lock:
            self._faults.clear()

    def take(
        self, method: str, verb: str | None, resource: str | None, subresource: str | None
    ) -> Fault | None:
        """The fault this request must fail with, if any (consumes one use of it)."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, verb, resource, subresource):
                    fault.hits += 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._faults)
