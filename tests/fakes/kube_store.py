"""Object storage for the fake API server: resourceVersions, optimistic concurrency, finalizers, watch history.

Stored objects are never mutated in place: every write stores a fresh dict. Readers may therefore hold or
serialise a stored object without copying it, and the watch history can keep references to old states.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.fakes.kube_errors import (
    STALE_OBJECT,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    not_found,
)
from tests.fakes.kube_patch import apply_patch
from tests.fakes.kube_resources import ResourceType

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

Matcher = Callable[[dict[str, Any]], bool]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# generateName suffixes use the same alphabet as upstream (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def rfc3339(epoch: float, micro: bool = False) -> str:
    """Format a timestamp as the API server does (`metav1.Time`, or `MicroTime` when micro)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    """One committed change; `old` is the previous state for MODIFIED (to detect selector transitions)."""

    rv: int
    type: str
    storage_key: tuple[str, str]
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(frozen=True)
class ListPage:
    """Result of a list call."""

    items: list[dict[str, Any]]
    resource_version: int
    continue_token: str | None
    remaining: int | None


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def _set_or_pop(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = copy.deepcopy(value)


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


class Store:
    """Thread-safe object store with a global resourceVersion counter and a bounded event history."""

    def __init__(self, clock: Callable[[], float] = time.time, history_limit: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.clock = clock
        self.closed = False
        # Bumped by drop_watches(): every watch open at that moment ends, as when an API server restarts.
        self.watch_epoch = 0
        self.listeners: list[Callable[[WatchEvent], None]] = []
        self._rv = 0
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        # Per resource, its keys in etcd order, kept up to date incrementally so that paging is not quadratic.
        self._index: dict[tuple[str, str], _SortedKeys] = {}
        self._history: deque[WatchEvent] = deque()
        self._history_limit = history_limit
        # Every event with rv > _floor is still in _history; older resourceVersions are "compacted".
        self._floor = 0

    # --- bookkeeping -------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        with self.lock:
            return self._rv

    def close(self) -> None:
        """Wake every watcher so it can end its stream."""
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def drop_watches(self) -> None:
        """End every open watch stream now (clients reconnect from their last resourceVersion)."""
        with self.changed:
            self.watch_epoch += 1
            self.changed.notify_all()

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older resourceVersions now get 410 Expired."""
        with self.changed:
            self._history.clear()
            self._floor = self._rv
            self.changed.notify_all()

    def _commit(self, rt: ResourceType, etype: str, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        # Caller holds the lock and has already stamped new["metadata"]["resourceVersion"] = self._rv.
        bucket = self._objects.setdefault(rt.storage_key, {})
        meta = new["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        index = self._index.setdefault(rt.storage_key, _SortedKeys())
        if etype == DELETED:
            if bucket.pop(key, None) is not None:
                index.remove(key)
        else:
            if key not in bucket:
                index.add(key)
            bucket[key] = new
        event = WatchEvent(self._rv, etype, rt.storage_key, new, old)
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._floor = self._history.popleft().rv
        self.changed.notify_all()
        for listener in list(self.listeners):
            listener(event)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _require(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        ns_key = (namespace or "") if rt.namespaced else ""
        obj = self._objects.get(rt.storage_key, {}).get((ns_key, name))
        if obj is None:
            raise not_found(rt.qualified, name)
        return obj

    def _stamp(self, obj: dict[str, Any], rt: ResourceType) -> None:
        # All versions share storage; each read path presents the object in the version it was asked for.
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind

    # --- reads -------------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object (shared: do not mutate); raise 404 ApiError if missing."""
        with self.lock:
            obj = self._require(rt, namespace, name)
        if obj.get("apiVersion") != rt.api_version:
            obj = {**obj, "apiVersion": rt.api_version}
        return obj

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Like get, but None when missing."""
        try:
            return self.get(rt, namespace, name)
        except ApiError:
            return None

    def select(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        match: Matcher | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListPage:
        """Objects sorted by (namespace, name) as etcd keys sort; `limit`/`continue` paging.

        A page costs O(log n + what it reads): the keys are kept sorted as objects come and go, and a continue
        token names the last key served, so the next page starts by bisection. Like the real API server, the
        page counts the items left (`remaining`) only when nothing but the namespace selects; with a
        selector that would mean reading them all.
        """
        start_after: tuple[str, str] | None = None
        scoped = bool(rt.namespaced and namespace)
        with self.lock:
            list_rv = self._rv
            if continue_token:
                list_rv, start_after = self._decode_continue(continue_token)
                if list_rv < self._floor:
                    raise ApiError(
                        410,
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                        "Expired",
                    )
            bucket = self._objects.get(rt.storage_key, {})
            keys = self._index[rt.storage_key].keys() if rt.storage_key in self._index else []
            lo = bisect.bisect_left(keys, (namespace, "")) if scoped else 0
            hi = bisect.bisect_left(keys, (f"{namespace}\0", "")) if scoped else len(keys)
            if start_after is not None:
                lo = max(lo, bisect.bisect_right(keys, start_after))
            selected: list[tuple[tuple[str, str], dict[str, Any]]] = []
            more = False
            position = lo
            while position < hi:
                key = keys[position]
                position += 1
                obj = bucket[key]
                if match is None or match(obj):
                    if limit and len(selected) == limit:
                        more = True
                        position -= 1
                        break
                    selected.append((key, obj))
            # The next page starts after the last key looked at, not the last one served: what the selector
            # rejected in between is not read again.
            resume = keys[position - 1] if more else None
        token = None
        remaining = None
        if resume is not None:
            token = self._encode_continue(list_rv, resume)
            if match is None:
                remaining = hi - position
        items = [
            obj if obj.get("apiVersion") == rt.api_version else {**obj, "apiVersion": rt.api_version}
            for _, obj in selected
        ]
        return ListPage(items, list_rv, token, remaining)

    @staticmethod
    def _encode_continue(rv: int, last: tuple[str, str]) -> str:
        raw = json.dumps({"rv": rv, "start": list(last)}).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as exc:
            raise bad_request(f"invalid continue token: {exc}") from exc

    # --- writes ------------------------------------------------------------------------------------------

    def create(
        self, rt: ResourceType, body: dict[str, Any], namespace: str | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Store a new object: name from generateName, uid, resourceVersion, creationTimestamp, generation."""
        obj = copy.deepcopy(body)
        meta = _meta(obj)
        self._stamp(obj, rt)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        for system_field in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(system_field, None)
        with self.lock:
            bucket = self._objects.get(rt.storage_key, {})
            ns_key = meta.get("namespace", "")
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise invalid(
                        rt.kind, "", "metadata.name: Required value: name or generateName is required"
                    )
                while True:
                    candidate = prefix + "".join(random.choices(_SUFFIX_ALPHABET, k=5))
                    if (ns_key, candidate) not in bucket:
                        meta["name"] = candidate
                        break
            name = meta["name"]
            if len(name) > 253 or not _NAME.match(name):
                raise invalid(
                    rt.kind, name, f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain"
                )
            if (ns_key, name) in bucket:
                raise already_exists(rt.qualified, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339(self.clock())
            meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = ""
                return obj
            meta["resourceVersion"] = self._next_rv()
            self._commit(rt, ADDED, obj, None)
        return obj

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        subresource: str | None = None,
        dry_run: bool = False,
        whole: bool = False,
    ) -> dict[str, Any]:
        """PUT: 409 when body's metadata.resourceVersion is stale; status only through the status subresource
        (`whole=True` writes spec and status together, for test setup)."""
        new = copy.deepcopy(body)
        meta = _meta(new)
        if meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        with self.lock:
            old = self._require(rt, namespace, name)
            requested_rv = meta.get("resourceVersion")
            if requested_rv and requested_rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt.qualified, name, STALE_OBJECT)
            return self._replace(rt, old, new if whole else self._scope(rt, old, new, subresource), dry_run)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PATCH with any of the three patch types; a resourceVersion set by the patch is a precondition."""
        with self.lock:
            old = self._require(rt, namespace, name)
            patched = apply_patch(old, patch, content_type, rt.custom)
            patched_rv = _meta(patched).get("resourceVersion")
            if patched_rv and patched_rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt.qualified, name, STALE_OBJECT)
            return self._replace(rt, old, self._scope(rt, old, patched, subresource), dry_run)

    def modify(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        change: Callable[[dict[str, Any]], None],
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Read-modify-write of the whole object (spec and status) under the lock, for server-side logic."""
        with self.lock:
            old = self._require(rt, namespace, name)
            new = copy.deepcopy(old)
            change(new)
            return self._replace(rt, old, new, dry_run)

    @staticmethod
    def _scope(
        rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str | None
    ) -> dict[str, Any]:
        # With a status subresource, the main resource cannot change status and /status changes only status.
        if subresource == "status":
            scoped = copy.deepcopy(old)
            _set_or_pop(scoped, "status", new.get("status"))
            return scoped
        if rt.has_status:
            _set_or_pop(new, "status", old.get("status"))
        return new

    def _replace(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        meta, old_meta = _meta(new), old["metadata"]
        self._stamp(new, rt)
        for system_field in (
            "uid",
            "name",
            "namespace",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            _set_or_pop(meta, system_field, old_meta.get(system_field))
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise invalid(
                    rt.kind,
                    old_meta["name"],
                    f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being "
                    f"deleted, found new finalizers {sorted(added)!r}",
                )
        if _without(new, "metadata", "status") != _without(old, "metadata", "status"):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            # A no-op write changes nothing upstream either: same resourceVersion, no watch event.
            return new
        if dry_run:
            return new
        meta["resourceVersion"] = self._next_rv()
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._commit(rt, DELETED, new, old)
        else:
            self._commit(rt, MODIFIED, new, old)
        return new

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        options: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """DELETE; returns (object, removed). With finalizers it only sets deletionTimestamp (removed=False)."""
        options = options or {}
        with self.lock:
            old = self._require(rt, namespace, name)
            old_meta = old["metadata"]
            preconditions = options.get("preconditions") or {}
            if preconditions.get("uid") and preconditions["uid"] != old_meta["uid"]:
                raise conflict(
                    rt.qualified,
                    name,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                    f"UID in object meta: {old_meta['uid']}",
                )
            if (
                preconditions.get("resourceVersion")
                and preconditions["resourceVersion"] != old_meta["resourceVersion"]
            ):
                raise conflict(
                    rt.qualified,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                    f"ResourceVersion in object meta: {old_meta['resourceVersion']}",
                )
            new = copy.deepcopy(old)
            meta = new["metadata"]
            grace = options.get("gracePeriodSeconds")
            if old_meta.get("finalizers"):
                if old_meta.get("deletionTimestamp"):
                    return old, False
                meta["deletionTimestamp"] = rfc3339(self.clock())
                meta["deletionGracePeriodSeconds"] = int(grace or 0)
                if dry_run:
                    return new, False
                meta["resourceVersion"] = self._next_rv()
                self._commit(rt, MODIFIED, new, old)
                return new, False
            if rt.storage_key == ("", "pods"):
                # Pods are deleted gracefully upstream: the API server first stamps deletionTimestamp (a
                # MODIFIED event), then removes the pod once its kubelet confirms, at once when it has none.
                # Here the confirmation always comes at once, whatever the grace period; the period is
                # only recorded.
                if grace is None:
                    grace = (new.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                meta.setdefault("deletionTimestamp", rfc3339(self.clock()))
                meta["deletionGracePeriodSeconds"] = int(grace)
                if not dry_run and not old_meta.get("deletionTimestamp"):
                    marked = copy.deepcopy(new)
                    marked["metadata"]["resourceVersion"] = self._next_rv()
                    self._commit(rt, MODIFIED, marked, old)
                    old = marked
            if dry_run:
                return new, True
            meta["resourceVersion"] = self._next_rv()
            self._commit(rt, DELETED, new, old)
            return new, True

    # --- watch -------------------------------------------------------------------------------------------

    def watch_open(
        self, rt: ResourceType, namespace: str | None, match: Matcher, resource_version: str | None
    ) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """Start a watch: events to send first, and the cursor (resourceVersion) to continue from.

        No resourceVersion (or "0") means "current state as ADDED events, then changes"; a specific one
        replays newer events from the history, or raises 410 Expired when it has been compacted away.
        """
        with self.lock:
            if not resource_version or resource_version == "0":
                page = self.select(rt, namespace, match)
                return [(ADDED, obj) for obj in page.items], self._rv
            try:
                start = int(resource_version)
            except ValueError as exc:
                raise bad_request(f"invalid resourceVersion {resource_version!r}") from exc
            if start < self._floor:
                raise expired(start, self._floor + 1)
            return self._events_since(start, rt, namespace, match), self._rv

    def watch_wait(
        self, cursor: int, rt: ResourceType, namespace: str | None, match: Matcher, timeout: float
    ) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """Block until something changed after `cursor` (or timeout/close); return matching events and cursor."""
        deadline = time.monotonic() + timeout
        with self.changed:
            epoch = self.watch_epoch
            while not self.closed and self._rv == cursor and self.watch_epoch == epoch:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            if cursor < self._floor:
                # This watcher fell behind a history that has since been trimmed: it must relist.
                raise expired(cursor, self._floor + 1)
            return self._events_since(cursor, rt, namespace, match), self._rv

    def _events_since(
        self, cursor: int, rt: ResourceType, namespace: str | None, match: Matcher
    ) -> list[tuple[str, dict[str, Any]]]:
        newer: list[WatchEvent] = []
        for event in reversed(self._history):
            if event.rv <= cursor:
                break
            newer.append(event)
        out = []
        for event in reversed(newer):
            if event.storage_key != rt.storage_key:
                continue
            if rt.namespaced and namespace and event.obj["metadata"].get("namespace") != namespace:
                continue
            sent = _filtered(event, match)
            if sent is not None:
                obj = event.obj
                if sent == DELETED and event.type == MODIFIED and event.old is not None:
                    # Leaving the selection: kube-apiserver sends the object as it last matched, stamped
                    # with this change's resourceVersion.
                    obj = {
                        **event.old,
                        "metadata": {**event.old["metadata"], "resourceVersion": str(event.rv)},
                    }
                if obj.get("apiVersion") != rt.api_version:
                    obj = {**obj, "apiVersion": rt.api_version}
                out.append((sent, obj))
        return out

    def all_objects(self) -> Iterable[tuple[tuple[str, str], dict[str, Any]]]:
        """Every stored object with its storage key (a snapshot, for debugging and dumps)."""
        with self.lock:
            return [(key, obj) for key, bucket in self._objects.items() for obj in bucket.values()]

    def drop(self, storage_key: tuple[str, str]) -> None:
        """Remove all objects of a resource without events (its CRD went away)."""
        with self.lock:
            self._objects.pop(storage_key, None)
            self._index.pop(storage_key, None)


class _SortedKeys:
    """The keys of one resource in sorted order, maintained lazily: additions and removals are noted in O(1)
    and folded in by the next read (a sort of an already sorted list plus the few new keys is linear), so a
    burst of writes costs one merge, and paging through an unchanging list costs a bisection a page."""

    __slots__ = ("_added", "_keys", "_removed")

    def __init__(self) -> None:
        self._keys: list[tuple[str, str]] = []
        self._added: set[tuple[str, str]] = set()
        self._removed: set[tuple[str, str]] = set()

    def add(self, key: tuple[str, str]) -> None:
        if key in self._removed:
            self._removed.discard(key)  # deleted and created again: it never left the sorted list
        else:
            self._added.add(key)

    def remove(self, key: tuple[str, str]) -> None:
        if key in self._added:
            self._added.discard(key)  # created and deleted between two reads
        else:
            self._removed.add(key)

    def keys(self) -> list[tuple[str, str]]:
        """The sorted keys (shared: do not mutate)."""
        if self._removed:
            removed = self._removed
            self._keys = [k for k in self._keys if k not in removed]
            self._removed = set()
        if self._added:
            self._keys.extend(self._added)
            self._keys.sort()
            self._added = set()
        return self._keys


def _filtered(event: WatchEvent, match: Matcher) -> str | None:
    # A watch with a selector sees objects enter and leave the selection as ADDED and DELETED.
    now_matches = match(event.obj)
    if event.type == ADDED:
        return ADDED if now_matches else None
    if event.type == DELETED:
        return DELETED if now_matches else None
    was_matching = event.old is not None and match(event.old)
    if now_matches and was_matching:
        return MODIFIED
    if now_matches:
        return ADDED
    if was_matching:
        return DELETED
    return None
