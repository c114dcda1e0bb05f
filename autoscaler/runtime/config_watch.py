"""Hot reload of the configuration file mounted from the tidal ConfigMap.

Kubernetes updates a mounted ConfigMap by writing a new timestamped directory and atomically swapping the
``..data`` symlink to it; the file's own path is a symlink through ``..data`` whose mtime never changes, and
inotify on it sees nothing. So the watcher polls the *content* read through the path (following symlinks)
and compares hashes. Polling every couple of seconds costs one small read and is immune to all of that.

A change is validated with ``load_config``. A valid one replaces the current configuration; an invalid or
unreadable one is reported (one line, naming the key path) and the last good configuration stays in use.

Several files may be layered (``tidal run --config base.yaml --config kai.yaml``, two keys of one ConfigMap):
:func:`load_layered` reads them in order, a later file's options replacing an earlier one's, and the watcher
reloads when any of them changes.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence

import structlog

from autoscaler.config.layers import LAYERED_SECTIONS, load_layers
from autoscaler.config.options import Config, ConfigError

__all__ = ["LAYERED_SECTIONS", "ConfigWatcher", "load_layered"]

PathLike = str | os.PathLike[str]


def load_layered(paths: Sequence[PathLike]) -> Config:
    """Read configuration files in order, each laid over the ones before it, and validate the result (see
    :mod:`autoscaler.config.layers`). One file is exactly :func:`~autoscaler.config.options.load_config`."""
    return load_layers(paths)[0]


log = structlog.get_logger("tidal.config")


class ConfigWatcher:
    """Polls ``path`` (one file, or several layered ones) and hands each new valid configuration to
    ``on_change``."""

    def __init__(
        self,
        path: PathLike | Sequence[PathLike],
        *,
        on_change: Callable[[Config], None],
        on_error: Callable[[str], None],
        interval: float = 2.0,
        clock: Callable[[], float] = time.time,
        sleeper: Callable[[float], object] | None = None,
    ) -> None:
        """Load the file now; raises ConfigError when it is invalid or unreadable, so a daemon never starts
        on a bad configuration. The first load is not passed to ``on_change``: read it from ``current``.

        ``sleeper(interval)`` waits between polls in the thread (default: a wait that ``stop()`` interrupts);
        ``clock`` timestamps ``loaded_at``.
        """
        listed = [path] if isinstance(path, str | os.PathLike) else list(path)
        if not listed:
            raise ValueError("ConfigWatcher needs at least one file")
        self.paths = [os.fspath(p) for p in listed]
        self.path = " + ".join(self.paths)  # how logs and errors name the configuration
        self.interval = interval
        self._on_change = on_change
        self._on_error = on_error
        self._clock = clock
        self._stop = threading.Event()
        self._sleep: Callable[[float], object] = self._stop.wait if sleeper is None else sleeper
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._polling = threading.Lock()
        self._last_error: str | None = None

        before = self._hash_or_none()
        self._current = load_layered(self.paths)  # ConfigError names the file and every bad key
        # If the file changed while it was loaded, remember no hash: the next poll validates it again.
        self._seen: bytes | None = before if before is not None and self._hash_or_none() == before else None
        self.loaded_at = clock()

    @property
    def current(self) -> Config:
        """The last valid configuration."""
        with self._lock:
            return self._current

    def check(self) -> bool:
        """Poll once; True when a new valid configuration was applied (and passed to ``on_change``).

        Content that is unchanged since the last poll, valid or not, is not validated or reported again.
        """
        # Serialised so a test (or a SIGHUP handler) calling check() cannot race the polling thread.
        with self._polling:
            return self._check()

    def _check(self) -> bool:
        before = self._digest()
        if before is None:
            return False
        if before == self._seen:
            self._last_error = None
            return False
        try:
            config: Config | None = load_layered(self.paths)
            problem = ""
        except ConfigError as err:
            config, problem = None, " ".join(str(err).split())  # one line, even for multi-line YAML errors
        # load_config read the file again; if it changed meanwhile (a swap mid-poll), what was validated may
        # not be what was hashed. Try again next poll rather than record the wrong hash.
        if self._digest() != before:
            return False
        self._seen = before
        if config is None:
            # Not de-duplicated by message: the hash already ensures one report per distinct content.
            self._report(problem, repeat=True)
            return False
        with self._lock:
            self._current = config
        self.loaded_at = self._clock()
        self._last_error = None
        log.info("configuration reloaded", path=self.path)
        try:
            self._on_change(config)
        except Exception:
            log.exception("applying the reloaded configuration failed", path=self.path)
        return True

    def start(self) -> None:
        """Poll every ``interval`` seconds on a daemon thread until ``stop()``; idempotent."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tidal-config-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and wait (up to ``timeout``) for the thread to finish."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sleep(self.interval)
            if self._stop.is_set():
                break
            try:
                self.check()
            except Exception:
                # The watcher must outlive any surprise; the daemon keeps its last good configuration.
                log.exception("configuration poll failed", path=self.path)

    def _hash(self) -> bytes:
        # open() follows the symlink chain (config.yaml -> ..data/config.yaml -> ..<timestamp>/config.yaml).
        digest = hashlib.sha256()
        for name in self.paths:
            with open(name, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
        return digest.digest()

    def _hash_or_none(self) -> bytes | None:
        try:
            return self._hash()
        except OSError:
            return None

    def _digest(self) -> bytes | None:
        """The content hash, or None after reporting why the file cannot be read."""
        try:
            return self._hash()
        except OSError as err:
            self._report(f"{err.filename or self.path}: cannot read the file: {err.strerror or err}")
            return None

    def _report(self, message: str, *, repeat: bool = False) -> None:
        # The same read failure on every poll (a deleted ConfigMap, say) is reported once, not every poll.
        if message == self._last_error and not repeat:
            return
        self._last_error = message
        log.warning("configuration not reloaded; keeping the last good one", path=self.path, error=message)
        try:
            self._on_error(message)
        except Exception:
            log.exception("reporting a configuration error failed", path=self.path)
