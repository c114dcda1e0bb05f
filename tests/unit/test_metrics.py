"""Metrics: the exported names are the contract dashboards rely on, and recording never raises."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from autoscaler.runtime.observability.metrics import METRIC_NAMES, METRIC_SERIES, Metrics


def families(metrics: Metrics) -> dict[str, list[Sample]]:
    """Exported families keyed by the name on their ``# TYPE`` line (the parser strips counters' _total)."""
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = family.samples
    return out


def test_exported_family_names_are_exactly_metric_names() -> None:
    metrics = Metrics()
    metrics.launch("g5.xlarge", "us-east-1a", "spot", "success")
    metrics.observe_reconcile(0.1, True, now=1000.0)

    exported = families(metrics)

    assert set(exported) == METRIC_NAMES
    samples = {s.name for samples in exported.values() for s in samples}
    assert samples <= METRIC_SERIES


def test_set_pending_drops_label_sets_that_vanished() -> None:
    metrics = Metrics()
    metrics.set_pending({("counted", "fits-nothing"): 3, ("ignored", "queue-limit"): 2})

    metrics.set_pending({("counted", "fits-nothing"): 1})

    pending = {
        (s.labels["state"], s.labels["reason"]): s.value for s in families(metrics)["tidal_pending_pods"]
    }
    assert pending == {("counted", "fits-nothing"): 1.0}


def test_reconcile_histogram_observes_duration_and_outcome() -> None:
    metrics = Metrics()

    metrics.observe_reconcile(0.3, True, now=1234.0)
    metrics.observe_reconcile(0.002, False, now=1240.0)

    exported = families(metrics)
    duration = {(s.name, s.labels.get("le")): s.value for s in exported["tidal_reconcile_duration_seconds"]}
    assert duration[("tidal_reconcile_duration_seconds_count", None)] == 2
    assert duration[("tidal_reconcile_duration_seconds_bucket", "0.005")] == 1
    assert duration[("tidal_reconcile_duration_seconds_bucket", "0.5")] == 2
    outcomes = {s.labels["outcome"]: s.value for s in exported["tidal_reconcile_total"]}
    assert outcomes == {"success": 1, "error": 1}
    assert exported["tidal_last_successful_reconcile_timestamp_seconds"][0].value == 1234.0


def test_recording_bad_values_never_raises_and_records_nothing_partial() -> None:
    metrics = Metrics()

    metrics.set_pending({("counted",): 1})  # type: ignore[dict-item]
    metrics.set_gpus(4, "many", None)  # type: ignore[arg-type]
    metrics.observe_reconcile("slow", True, now=1.0)  # type: ignore[arg-type]
    metrics.scale_up_latency(None)  # type: ignore[arg-type]

    exported = families(metrics)
    assert exported["tidal_pending_pods"] == []
    assert exported["tidal_cluster_gpus"][0].value == 0
    assert exported["tidal_reconcile_total"] == []
