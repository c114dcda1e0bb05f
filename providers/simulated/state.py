"""The simulated cloud's state: instance records and capacity rules, in memory or shared through a file.

With a ``stateFile`` several processes (two tidal replicas, a test and a daemon) see one cloud: every
transaction takes an exclusive ``fcntl.flock`` on ``<stateFile>.lock``, reads the JSON, lets the caller
change it, and writes it back atomically (temporary file + rename) only when it changed and nothing raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autoscaler.cloud import ProviderError
from autoscaler.core.model import Arch, CapacityType, InstanceState, Taint
from autoscaler.core.offering import Instance, Offering, Reservation, ReservationKind
from providers.simulated.settings import CapacityRule

__all__ = ["CloudState", "FileStore", "InstanceRecord", "MemoryStore", "StateStore"]

STATE_VERSION = 1
PENDING, RUNNING, TERMINATED = "pending", "running", "terminated"


@dataclass(slots=True)
class InstanceRecord:
    """One simulated instance and how far its node has got; times are ``clock()`` seconds."""

    id: str
    cluster: str
    token: str
    offering: Offering
    created: float
    running_at: float
    register_at: float
    gpu_ready_delay: float
    tags: dict[str, str]
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    state: str = PENDING
    terminated_at: float | None = None
    interrupted: bool = False
    registered_at: float | None = None  # when this cloud's kubelet created the Node
    gpus_reported: bool = False
    node_down: bool = False  # NotReady written after the instance went away

    @property
    def provider_id(self) -> str:
        """The Node's ``spec.providerID``."""
        return f"simulated:///{self.offering.zone}/{self.id}"

    def instance(self) -> Instance:
        """The provider-contract view of this record."""
        return Instance(
            id=self.id,
            provider_id=self.provider_id,
            instance_type=self.offering.instance_type,
            zone=self.offering.zone,
            capacity_type=self.offering.capacity_type,
            state=InstanceState(self.state),
            launch_token=self.token,
            created=self.created,
            price=self.offering.price,
            gpu_count=self.offering.gpu_count,
            tags=dict(self.tags),
            reservation_id=self.offering.reservation.id if self.offering.reservation is not None else "",
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form kept in the state file."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        # Not the node template: the provider builds it again from the offering when it needs it. Nor what
        # the offering works out itself (its hash).
        data["offering"] = {
            f.name: getattr(self.offering, f.name)
            for f in dataclasses.fields(Offering)
            if f.name != "template" and f.init
        }
        data["offering"]["arch"] = self.offering.arch.value
        r = self.offering.reservation
        if r is not None:
            data["offering"]["reservation"] = {
                **{f.name: getattr(r, f.name) for f in dataclasses.fields(r)},
                "kind": r.kind.value,
            }
        data["taints"] = [[t.key, t.value, t.effect] for t in self.taints]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InstanceRecord:
        """Inverse of :meth:`to_json`."""
        values = dict(data)
        offering = {
            **data["offering"],
            "arch": Arch(data["offering"]["arch"]),
            "capacity_type": CapacityType(data["offering"]["capacity_type"]),
        }
        r = offering.get("reservation")
        if r is not None:
            offering["reservation"] = Reservation(**{**r, "kind": ReservationKind(r["kind"])})
        values["offering"] = Offering(**offering)
        values["taints"] = tuple(Taint(*t) for t in data["taints"])
        return cls(**values)


@dataclass(slots=True)
class CloudState:
    """Everything the simulated cloud remembers; shared by every provider on the same store."""

    counter: int = 0
    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    capacity_rules: list[CapacityRule] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The state file's document."""
        return {
            "version": STATE_VERSION,
            "counter": self.counter,
            "instances": [r.to_json() for r in self.instances.values()],
            "capacityRules": [r.to_json() for r in self.capacity_rules],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CloudState:
        """Inverse of :meth:`to_json`."""
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported state version {data.get('version')!r}")
        records = (InstanceRecord.from_json(r) for r in data["instances"])
        return cls(
            counter=int(data["counter"]),
            instances={r.id: r for r in records},
            capacity_rules=[CapacityRule.from_json(r) for r in data["capacityRules"]],
        )

    def set_capacity(self, rule: CapacityRule) -> None:
        """Add a rule; earlier rules it covers can no longer decide anything and are dropped."""
        self.capacity_rules = [*(r for r in self.capacity_rules if not rule.covers(r)), rule]


class StateStore(Protocol):
    """Where the state lives; ``transaction()`` gives exclusive access and keeps what the caller changed."""

    def transaction(self) -> contextlib.AbstractContextManager[CloudState]:
        """Exclusive access to the state for one read-modify-write."""
        ...


class MemoryStore:
    """State of one process; callers change it only after every check has passed."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = CloudState()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[CloudState]:
        """Exclusive access to the in-memory state."""
        with self._lock:
            yield self._state


class FileStore:
    """State in a JSON file shared by processes; a transaction that raises leaves the file untouched."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._lock = threading.RLock()
        self._held: CloudState | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[CloudState]:
        """Lock the file, read it, yield the state, write it back if it changed."""
        with self._lock:
            if self._held is not None:  # nested transaction in this thread: same state, outer one writes
                yield self._held
                return
            try:
                lock_file = open(self.lock_path, "a+b")  # noqa: SIM115 - closed below
            except OSError as err:
                raise ProviderError(f"cannot open {str(self.lock_path)!r}: {err.strerror or err}") from None
            with lock_file:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
                try:
                    before, state = self._load()
                    self._held = state
                    try:
                        yield state
                    finally:
                        self._held = None
                    after = json.dumps(state.to_json(), sort_keys=True)
                    if after != before:
                        self._store(after)
                finally:
                    fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def _load(self) -> tuple[str, CloudState]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return "", CloudState()
        except OSError as err:
            raise ProviderError(f"simulated state file {str(self.path)!r}: {err.strerror or err}") from None
        if not text.strip():
            return "", CloudState()
        try:
            state = CloudState.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as err:
            raise ProviderError(
                f"simulated state file {str(self.path)!r} is not a state document: {err}"
            ) from None
        return json.dumps(state.to_json(), sort_keys=True), state

    def _store(self, document: str) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(document, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as err:
            raise ProviderError(f"simulated state file {str(self.path)!r}: {err.strerror or err}") from None
