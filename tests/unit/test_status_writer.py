"""StatusWriter: the reconcile hands the status over and goes on; only the newest status is written."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest
from structlog.testing import capture_logs

from autoscaler.runtime.observability.status_writer import StatusWriter


class SlowApi:
    """Records each write; the first one blocks until released, as a slow API server would."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.release = threading.Event()
        self.started = threading.Event()

    def write(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.started.set()
        self.release.wait(5)
        self.written.append(data["status"])


def test_a_started_writer_returns_before_the_api_server_answers() -> None:
    api = SlowApi()
    writer = StatusWriter(api.write)
    writer.start()
    try:
        writer.submit("tidal-system", "tidal-status", {"status": '{"pending": 12}'})
        assert api.written == []
        api.release.set()
        assert writer.flush()
        assert api.written == ['{"pending": 12}']
    finally:
        writer.stop()


def test_statuses_handed_over_while_a_write_is_under_way_are_replaced_by_the_newest() -> None:
    api = SlowApi()
    writer = StatusWriter(api.write)
    writer.start()
    try:
        writer.submit("tidal-system", "tidal-status", {"status": "reconcile 1"})
        assert api.started.wait(5)  # reconcile 1's status is being written
        for i in range(2, 6):
            writer.submit("tidal-system", "tidal-status", {"status": f"reconcile {i}"})
        api.release.set()
        assert writer.flush()
    finally:
        writer.stop()
    assert api.written == ["reconcile 1", "reconcile 5"]


def test_a_writer_not_started_writes_in_line_and_raises_what_fails() -> None:
    written: list[Mapping[str, str]] = []
    StatusWriter(lambda ns, name, data: written.append(data)).submit(
        "tidal-system", "tidal-status", {"a": "b"}
    )
    assert written == [{"a": "b"}]

    def refused(namespace: str, name: str, data: Mapping[str, str]) -> None:
        raise RuntimeError("HTTP 403: configmaps is forbidden")

    with pytest.raises(RuntimeError, match="forbidden"):
        StatusWriter(refused).submit("tidal-system", "tidal-status", {"a": "b"})


def test_a_failed_background_write_is_logged_and_the_next_status_is_written() -> None:
    written: list[str] = []

    def api(namespace: str, name: str, data: Mapping[str, str]) -> None:
        if data["status"] == "first":
            raise RuntimeError('HTTP 404: namespaces "tidal-system" not found')
        written.append(data["status"])

    writer = StatusWriter(api)
    writer.start()
    try:
        with capture_logs() as logs:
            writer.submit("tidal-system", "tidal-status", {"status": "first"})
            assert writer.flush()
        writer.submit("tidal-system", "tidal-status", {"status": "second"})
        assert writer.flush()
    finally:
        writer.stop()
    assert [e["event"] for e in logs] == ["status_write_failed"]
    assert "tidal-system" in logs[0]["error"]
    assert written == ["second"]


def test_stop_writes_the_status_that_waits() -> None:
    api = SlowApi()
    writer = StatusWriter(api.write)
    writer.start()
    writer.submit("tidal-system", "tidal-status", {"status": "before"})
    assert api.started.wait(5)
    writer.submit("tidal-system", "tidal-status", {"status": "last"})
    api.release.set()

    writer.stop()

    assert api.written == ["before", "last"]
