"""A list-then-watch cache of one resource, decoded straight from JSON into model values.

The python client has no informers, and its ``Watch`` helper deserialises every event into generated models
(slow) and retries a 410 only once. This one lists in pages with ``_preload_content=False``, watches from the
list's resourceVersion with bookmarks, relists on 410 Gone, and reconnects with jittered exponential backoff on
anything else. Nothing an object or a listener does can kill the thread.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import orjson
import structlog
from kubernetes.client.exceptions import ApiException

from autoscaler.runtime.kube.client import KubeClient, api_error_message, describe_call

__all__ = ["ADDED", "DELETED", "MODIFIED", "Backoff", "Informer", "Key", "ListFn", "collector_paused"]

T = TypeVar("T")
Key = tuple[str, str]  # (namespace or "", name): sorts like etcd keys, unlike "ns/name" strings
ListFn = Callable[..., Any]
"""A generated list method (``CoreV1Api.list_node``, or ``functools.partial`` of a CustomObjectsApi list)."""

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"

log = structlog.get_logger(__name__)


class Backoff:
    """Exponential backoff with equal jitter: the delay is never below half its step, so never a spin."""

    def __init__(
        self, base: float = 0.2, cap: float = 30.0, rng: Callable[[], float] = random.random
    ) -> None:
        self.base = base
        self.cap = cap
        self._rng = rng
        self.attempts = 0

    def next(self) -> float:
        """The delay before the next attempt; each call doubles the step up to ``cap``."""
        step: float = min(self.cap, self.base * (2 ** min(self.attempts, 30)))
        self.attempts += 1
        return step / 2 + self._rng() * step / 2

    def reset(self) -> None:
        """Back to ``base`` after a healthy watch."""
        self.attempts = 0


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = False
_BIG_LIST_OBJECTS = 200_000  # objects left for the collector by a list of roughly 10,000 pods


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a list is fetched and decoded; nests across threads.

    A 100,000-pod list allocates millions of objects that all survive, and the collector walks them again and
    again as they age, generation by generation: that doubles the list's time (about 6 s against 3 s on
    the replayed pages of bench/reconcile_scale.py). Lists and decoded objects hold no reference cycles, so
    nothing is missed; the pause lasts one list (seconds, bounded by the request timeout per page), and the
    collector runs, once in full, when the last list in progress is done, then freezes what is left.
    """
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        _collector_pauses += 1
        if _collector_pauses == 1:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            resume = _collector_pauses == 0 and _collector_was_enabled
            if resume:
                gc.enable()
        if resume and gc.get_count()[0] > _BIG_LIST_OBJECTS:
            # After a big list the deferred work is done now, in the informer's thread, rather than by whichever
            # allocation next crosses the threshold (a reconcile's: 0.9 s instead of 0.45 s at 100,000 pods).
            gc.collect()
            # What survived (the cache's millions of objects) is then left out of every later collection: a
            # full one would walk them all again, inside a reconcile (1.2 s instead of 0.6 s at 100,000 pods,
            # one reconcile in three). They hold no cycles, so reference counting still frees each one.
            gc.freeze()


class _Expired(Exception):
    """The resourceVersion we watch from is gone from the server's history: relist."""


_RESTART = object()  # a paged list starts over (its continue token expired)


class _Failed:
    """A page request that failed, passed from the fetching thread to the decoding one."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _WatchError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _lines(resp: Any) -> Iterator[bytes]:
    """Newline-delimited JSON events from a (chunked) watch response, as they arrive."""
    buffer = bytearray()
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer.strip():
        yield bytes(buffer)


def _retry_after(exc: BaseException) -> float:
    headers = getattr(exc, "headers", None)
    try:
        return float(headers.get("Retry-After") or 0) if headers else 0.0
    except (TypeError, ValueError):
        return 0.0


class Informer(Generic[T]):
    """A watch-backed cache of one resource: ``{(namespace, name): converted object}``.

    ``convert`` turns one JSON object into a model value; a ``ConversionError`` (or any other exception) for
    one object is logged and that object left out. Listeners run on the informer thread after the cache has
    changed, as ``fn(event_type, old, new)`` with ``old`` None for ADDED and ``new`` None for DELETED.
    """

    def __init__(
        self,
        kind: str,
        client: KubeClient,
        list_fn: ListFn,
        convert: Callable[[Mapping[str, Any]], T],
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        healthy_watch: float = 1.0,
        lock: threading.RLock | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.kind = kind
        self._client = client
        self._list_fn = list_fn
        self._resource = describe_call(list_fn)[1]  # for the error metric: "pods", "podgroups"...
        self._convert = convert
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._healthy_watch = healthy_watch
        self._backoff = Backoff(backoff_base, backoff_max, rng)
        # ClusterCache shares one lock across informers so a snapshot of all kinds is taken atomically.
        self._lock = lock if lock is not None else threading.RLock()
        self._items: dict[Key, T] = {}
        # The keys in order, kept as events come (an insertion or a removal is one memmove, where sorting
        # 100,000 keys at every snapshot was not), and the objects in that order until the next change.
        self._keys: list[Key] = []
        self._sorted: tuple[T, ...] | None = None
        self._rv = ""
        self._listeners: list[Callable[[str, T | None, T | None], None]] = []
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None
        self._resp_lock = threading.Lock()
        self._delivered = False  # the current watch has delivered an event or bookmark
        # Why the last list or watch failed, for a start-up that cannot sync to say why.
        self.last_error = ""
        self._stats = {"lists": 0, "relists": 0, "watches": 0, "watch_restarts": 0, "watch_errors": 0}
        self._stats |= {"decode_errors": 0, "listener_errors": 0, "events": 0}

    # --- public surface ----------------------------------------------------------------------------------

    def add_listener(self, fn: Callable[[str, T | None, T | None], None]) -> None:
        """Call ``fn(event_type, old, new)`` after every change to the cache (relists included)."""
        self._listeners.append(fn)

    def start(self) -> None:
        """Start listing and watching in a daemon thread (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, breaking an open watch instead of waiting for its timeout."""
        self._stop.set()
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            shutdown = getattr(resp, "shutdown", None)  # urllib3 >= 2.3 unblocks a read in another thread
            # The connection may already be gone; stopping must not fail.
            with contextlib.suppress(Exception):
                shutdown() if shutdown is not None else resp.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def has_synced(self) -> bool:
        """The first full list has been loaded into the cache."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until the first list is loaded; False on timeout."""
        return self._synced.wait(timeout)

    def items(self) -> list[T]:
        """A copy of the cached objects, sorted by (namespace, name)."""
        return list(self.sorted_items())

    def sorted_items(self) -> tuple[T, ...]:
        """The cached objects, sorted by (namespace, name): the same tuple while nothing changes."""
        with self._lock:
            if self._sorted is None:
                self._sorted = tuple(map(self._items.__getitem__, self._keys))
            return self._sorted

    def get(self, namespace: str | None, name: str) -> T | None:
        """One cached object (namespace None or "" for cluster-scoped resources)."""
        with self._lock:
            return self._items.get((namespace or "", name))

    @property
    def resource_version(self) -> str:
        """The resourceVersion the cache is current to (advanced by events and bookmarks)."""
        with self._lock:
            return self._rv

    def stats(self) -> dict[str, int]:
        """Counters for metrics: objects, lists, relists, watches, watch_restarts, watch_errors (failed lists and
        watches), decode_errors, listener_errors, events, synced."""
        with self._lock:
            return {**self._stats, "objects": len(self._items), "synced": int(self._synced.is_set())}

    # --- the loop ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            self._delivered = False
            healthy = False
            try:
                if need_list:
                    self._list()
                    need_list = False
                healthy = self._watch()
                delay = 0.0 if healthy else self._backoff.next()
            except _Expired:
                self._count("relists")
                need_list = True
                # Relist at once after a watch that was working; a 410 straight after a list means trouble.
                healthy = self._delivered
                delay = 0.0 if healthy else self._backoff.next()
                log.info("watch expired, relisting", kind=self.kind, resource_version=self._rv)
            except Exception as exc:  # network, 5xx, 429, a bug: reconnect later, never die
                if self._stop.is_set():
                    break  # stop() broke the connection on purpose
                self._count("watch_errors")
                self.last_error = self._describe(exc)
                delay = max(self._backoff.next(), _retry_after(exc))
                log.warning(
                    "watch failed, retrying",
                    kind=self.kind,
                    error=self._describe(exc),
                    retry_in=round(delay, 3),
                )
            if healthy:
                self._backoff.reset()
            if not self._stop.is_set():
                self._count("watch_restarts")
            if delay > 0:
                self._stop.wait(delay)

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, ApiException):
            return f"HTTP {exc.status}: {api_error_message(exc)}"
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._stats[name] += n

    def _fetch_pages(self, pages: queue.Queue[Any], done: threading.Event) -> None:
        """Request every page in turn, handing each to ``pages``; runs ahead of the decoding by one page."""

        def put(item: Any) -> bool:
            while not done.is_set():
                try:
                    pages.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        token: str | None = None
        restarted = False
        try:
            while not done.is_set():
                kwargs: dict[str, Any] = {"limit": self._page_size}
                if token:
                    kwargs["_continue"] = token
                try:
                    body = self._client.call(self._list_fn, **kwargs)
                except ApiException as exc:
                    if exc.status == 410 and token and not restarted:
                        # The continue token outlived the server's history: start over, once.
                        token, restarted = None, True
                        put(_RESTART)
                        continue
                    raise
                token = (body.get("metadata") or {}).get("continue") or None
                if not put(body) or token is None:
                    return
        except BaseException as exc:  # handed to the decoding side, which raises it in the informer thread
            put(_Failed(exc))

    def _list(self) -> None:
        """List every page, then swap the cache in one step and tell listeners what changed.

        The next page is requested while this one is decoded (one page ahead, so memory stays bounded): the
        API server's encoding and the wire overlap with the decoding, which is most of a large list's time.
        """
        items: dict[Key, T] = {}
        decode_errors = 0
        pages: queue.Queue[Any] = queue.Queue(maxsize=1)
        done = threading.Event()
        fetcher = threading.Thread(
            target=self._fetch_pages, args=(pages, done), name=f"informer-{self.kind}-list", daemon=True
        )
        with collector_paused():
            fetcher.start()
            try:
                while True:
                    body = pages.get()
                    if body is _RESTART:
                        items, decode_errors = {}, 0
                        continue
                    if isinstance(body, _Failed):
                        raise body.error
                    for obj in body.get("items") or ():
                        value = self._decode(obj)
                        if value is None:
                            decode_errors += 1
                        else:
                            items[_key(obj)] = value
                    meta = body.get("metadata") or {}
                    if not meta.get("continue"):
                        rv = str(meta.get("resourceVersion") or "")
                        break
            finally:
                done.set()
        with self._lock:
            old, self._items, self._rv = self._items, items, rv
            self._keys, self._sorted = sorted(items), None
            self._stats["lists"] += 1
            self._stats["decode_errors"] += decode_errors
        self._synced.set()
        log.debug("listed", kind=self.kind, objects=len(items), resource_version=rv)
        if self._listeners:
            for key, new in items.items():
                before = old.get(key)
                if before is None:
                    self._notify(ADDED, None, new)
                elif before != new:
                    self._notify(MODIFIED, before, new)
            for key, gone in old.items():
                if key not in items:
                    self._notify(DELETED, gone, None)

    def _watch(self) -> bool:
        """One watch connection; True when it was healthy (delivered something or lasted a while)."""
        self._client.limiter.acquire()
        with self._lock:
            rv = self._rv
        started = time.monotonic()
        try:
            resp = self._open_watch(rv)
        except Exception as exc:
            self._client.record_error("watch", self._resource, exc)
            if isinstance(exc, ApiException) and exc.status == 410:
                # Some servers refuse a too-old resourceVersion outright, not in-band.
                raise _Expired() from None
            raise
        with self._resp_lock:
            # stop() sets the flag before looking for a response: either it sees this one, or we see the flag.
            self._resp = resp
            stopping = self._stop.is_set()
        self._count("watches")
        try:
            for line in () if stopping else _lines(resp):
                if self._stop.is_set():
                    break
                if self._handle(line):
                    self._delivered = True
        except _Expired:
            self._client.record_error("watch", self._resource, "410")
            raise
        except _WatchError as exc:
            self._client.record_error("watch", self._resource, str(exc.status))
            raise
        except Exception as exc:
            if not self._stop.is_set():  # stop() breaks the stream on purpose
                self._client.record_error("watch", self._resource, exc)
            raise
        finally:
            with self._resp_lock:
                self._resp = None
            resp.close()
            resp.release_conn()
        return self._delivered or time.monotonic() - started >= self._healthy_watch

    def _open_watch(self, rv: str) -> Any:
        return self._list_fn(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            # The server ends the watch at timeout_seconds; the read timeout only catches a dead connection.
            _request_timeout=(self._client.request_timeout[0], self._watch_timeout + 30),
        )

    def _handle(self, line: bytes) -> bool:
        try:
            event = orjson.loads(line)
        except ValueError:
            log.warning("undecodable watch line skipped", kind=self.kind, size=len(line))
            return False
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise _Expired()
            raise _WatchError(code, str(obj.get("message") or obj.get("reason") or "watch error"))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if etype == "BOOKMARK":
            with self._lock:
                self._rv = rv or self._rv
            return True
        if etype not in (ADDED, MODIFIED, DELETED):
            log.warning("unknown watch event type skipped", kind=self.kind, event_type=etype)
            return True
        key = _key(obj)
        new = None if etype == DELETED else self._decode(obj)
        with self._lock:
            old = self._items.get(key)
            if new is None:
                if self._items.pop(key, None) is not None:
                    del self._keys[bisect.bisect_left(self._keys, key)]
                if etype != DELETED:
                    # An object that no longer decodes must not linger in its last good shape.
                    self._stats["decode_errors"] += 1
            else:
                if old is None:
                    bisect.insort(self._keys, key)
                self._items[key] = new
            self._sorted = None
            self._rv = rv or self._rv
            self._stats["events"] += 1
        if new is None:
            if old is not None:
                self._notify(DELETED, old, None)
        else:
            self._notify(ADDED if old is None else MODIFIED, old, new)
        return True

    def _decode(self, obj: Mapping[str, Any]) -> T | None:
        try:
            return self._convert(obj)
        except Exception as exc:
            namespace, name = _key(obj)
            log.warning(
                "object skipped: cannot decode",
                kind=self.kind,
                namespace=namespace or None,
                name=name,
                error=str(exc),
            )
            return None

    def _notify(self, etype: str, old: T | None, new: T | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(etype, old, new)
            except Exception:
                self._count("listener_errors")
                log.exception("informer listener failed", kind=self.kind, event_type=etype)
