"""ConfigWatcher: valid changes swap in, invalid ones keep the last good config, ConfigMap symlink swaps count."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from autoscaler.config.options import Config, ConfigError
from autoscaler.runtime.config_watch import ConfigWatcher, load_layered

GOOD = "cloud: aws\nregion: us-east-1\nclusterGPULimit: 8\n"


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Config] = []
        self.errors: list[str] = []

    def watch(self, path: Path) -> ConfigWatcher:
        return ConfigWatcher(path, on_change=self.changes.append, on_error=self.errors.append)


def test_valid_change_replaces_the_current_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    seen = Recorder()
    watcher = seen.watch(path)

    assert not watcher.check()  # unchanged content
    path.write_text(GOOD.replace("8", "16"))

    assert watcher.check()
    assert watcher.current.cluster_gpu_limit == 16
    assert [c.cluster_gpu_limit for c in seen.changes] == [16]
    assert seen.errors == []


def test_invalid_change_keeps_last_good_and_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    seen = Recorder()
    watcher = seen.watch(path)

    path.write_text(GOOD + "scaleDown:\n  maxParallelDrains: 0\n")

    assert not watcher.check()
    assert not watcher.check()  # reported once per distinct content
    assert watcher.current.cluster_gpu_limit == 8
    assert seen.changes == []
    assert len(seen.errors) == 1
    assert "scaleDown.maxParallelDrains" in seen.errors[0]
    assert "\n" not in seen.errors[0]


def test_unreadable_file_is_reported_and_last_good_kept(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    seen = Recorder()
    watcher = seen.watch(path)

    path.unlink()

    assert not watcher.check()
    assert not watcher.check()
    assert watcher.current.cluster_gpu_limit == 8
    assert len(seen.errors) == 1
    assert "cannot read" in seen.errors[0]


def test_kubernetes_data_symlink_swap_is_detected(tmp_path: Path) -> None:
    # The layout kubelet writes for a mounted ConfigMap.
    for version, limit in (("..2024_01_01", 8), ("..2024_01_02", 32)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "config.yaml").write_text(f"cloud: aws\nclusterGPULimit: {limit}\n")
    os.symlink("..2024_01_01", tmp_path / "..data")
    os.symlink("..data/config.yaml", tmp_path / "config.yaml")
    seen = Recorder()
    watcher = seen.watch(tmp_path / "config.yaml")

    os.symlink("..2024_01_02", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    assert watcher.check()
    assert watcher.current.cluster_gpu_limit == 32


def test_invalid_first_load_raises(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("clusterGPULimit: -1\n")
    seen = Recorder()

    with pytest.raises(ConfigError, match="clusterGPULimit"):
        seen.watch(path)
    with pytest.raises(ConfigError):
        seen.watch(tmp_path / "missing.yaml")
    assert seen.errors == []


def test_thread_polls_until_stopped(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    changed = threading.Event()
    limits: list[int | None] = []

    def on_change(config: Config) -> None:
        limits.append(config.cluster_gpu_limit)
        changed.set()

    watcher = ConfigWatcher(path, on_change=on_change, on_error=print, interval=0.001)
    path.write_text(GOOD.replace("8", "4"))

    watcher.start()
    try:
        assert changed.wait(timeout=5)
    finally:
        watcher.stop()

    assert limits == [4]


# --- layered files (tidal run --config base.yaml --config kai.yaml) ------------------------------------


def test_a_later_file_overrides_an_earlier_ones_keys_and_merges_its_sections(tmp_path: Path) -> None:
    base = tmp_path / "config.yaml"
    base.write_text(GOOD + "schedulerNames: [default-scheduler]\nscaleDown:\n  maxParallelDrains: 2\n")
    preset = tmp_path / "kai.yaml"
    preset.write_text(
        "clusterGPULimit: 16\nschedulerNames: [kai-scheduler]\nscaleDown:\n  nodeUnneededDuration: 1m\n"
    )

    config = load_layered([base, preset])

    assert config.cloud == "aws" and config.region == "us-east-1"  # only in the first file
    assert config.cluster_gpu_limit == 16  # both: the later file wins
    assert config.scheduler_names == ("kai-scheduler",)  # a list is replaced, not merged
    assert (config.scale_down.max_parallel_drains, config.scale_down.node_unneeded_duration) == (2, 60.0)


def test_a_bad_key_in_any_layer_names_every_file(tmp_path: Path) -> None:
    base = tmp_path / "config.yaml"
    base.write_text(GOOD)
    preset = tmp_path / "kai.yaml"
    preset.write_text("clusterGPULimt: 16\n")
    with pytest.raises(ConfigError) as caught:
        load_layered([base, preset])
    assert f"{base} + {preset}" in str(caught.value)
    assert "clusterGPULimt: unknown key" in str(caught.value)


def test_a_change_to_any_layer_is_reloaded(tmp_path: Path) -> None:
    base = tmp_path / "config.yaml"
    base.write_text(GOOD)
    preset = tmp_path / "kai.yaml"
    preset.write_text("clusterGPULimit: 16\n")
    seen = Recorder()
    watcher = ConfigWatcher([base, preset], on_change=seen.changes.append, on_error=seen.errors.append)
    assert watcher.current.cluster_gpu_limit == 16

    preset.write_text("clusterGPULimit: 24\n")
    assert watcher.check()
    base.write_text(GOOD.replace("us-east-1", "us-west-2"))
    assert watcher.check()
    assert [(c.region, c.cluster_gpu_limit) for c in seen.changes] == [("us-east-1", 24), ("us-west-2", 24)]
