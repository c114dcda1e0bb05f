"""Time-slicing and MPS configs of NVIDIA's device plugin, and which one a node runs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from autoscaler.core.gpu.device_plugin import (
    NO_SHARING,
    SharingConfig,
    SharingConfigError,
    SharingConfigs,
    SharingStrategy,
    sharing_config,
)

# The keys of a device-plugin ConfigMap as the GPU operator's time-slicing guide writes them.
TIME_SLICING = yaml.safe_load(
    """
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
)
MPS = yaml.safe_load(
    """
version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
)


def test_time_slicing_replicas_multiply_the_gpus_a_node_advertises() -> None:
    config = sharing_config(TIME_SLICING, "a100-ts")
    assert config.strategy == SharingStrategy.TIME_SLICING
    assert config.advertised("nvidia.com/gpu", 8) == {"nvidia.com/gpu": 32}
    assert config.per_device() == 4


def test_mps_with_rename_advertises_shared_gpus() -> None:
    config = sharing_config(MPS, "mps-10")
    assert config.strategy == SharingStrategy.MPS
    assert config.advertised("nvidia.com/gpu", 8) == {"nvidia.com/gpu.shared": 80}


def test_a_config_without_sharing_leaves_gpus_as_they_are() -> None:
    config = sharing_config({"version": "v1", "flags": {"migStrategy": "none"}}, "plain")
    assert config == NO_SHARING
    assert config.advertised("nvidia.com/gpu", 8) == {"nvidia.com/gpu": 8}


def test_mps_wins_over_time_slicing_as_in_the_device_plugin() -> None:
    both = {"sharing": {**TIME_SLICING["sharing"], **MPS["sharing"]}}
    assert sharing_config(both).strategy == SharingStrategy.MPS


def test_a_resource_that_is_not_shared_is_one_per_device() -> None:
    config = sharing_config(TIME_SLICING)
    assert config.advertised("nvidia.com/mig-1g.10gb", 14) == {"nvidia.com/mig-1g.10gb": 14}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}},
            "device plugin config 'ts': sharing.timeSlicing.resources[0].replicas: 1 is not a whole number >= 2",
            id="one-replica",
        ),
        pytest.param(
            {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": "4"}]}}},
            "device plugin config 'ts': sharing.timeSlicing.resources[0].replicas: '4' is not a whole number >= 2",
            id="replicas-as-string",
        ),
        pytest.param(
            {"sharing": {"timeSlicing": {"renameByDefault": False}}},
            "device plugin config 'ts': sharing.timeSlicing.resources: no resources specified",
            id="no-resources",
        ),
        pytest.param(
            {"sharing": {"timeSlicing": {"resources": [{"replicas": 4}]}}},
            "device plugin config 'ts': sharing.timeSlicing.resources[0].name: no resource name specified",
            id="no-name",
        ),
        pytest.param(
            {"sharing": {"mps": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}},
            "device plugin config 'ts': sharing.mps.resources: MPS shares only nvidia.com/gpu (whole GPUs), not "
            "['nvidia.com/mig-1g.10gb']",
            id="mps-on-mig",
        ),
        pytest.param(
            {
                "sharing": {
                    "timeSlicing": {"renameByDefault": "yes", "resources": [{"name": "g", "replicas": 2}]}
                }
            },
            "device plugin config 'ts': sharing.timeSlicing.renameByDefault: expected true or false, got 'yes'",
            id="rename-not-bool",
        ),
    ],
)
def test_a_config_the_device_plugin_refuses_is_one_line_naming_it(
    raw: dict[str, dict[str, dict[str, list[dict[str, Any]]]]]
    | dict[str, dict[str, dict[str, list[dict[str, str]]]]]
    | dict[str, dict[str, dict[str, bool]]]
    | dict[str, dict[str, dict[str, list[dict[str, int]]]]]
    | dict[str, dict[str, dict[str, Any]]],
    message: str,
) -> None:
    with pytest.raises(SharingConfigError) as raised:
        sharing_config(raw, "ts")
    assert str(raised.value) == message


def test_a_node_runs_the_config_its_label_names() -> None:
    configs = SharingConfigs(
        {"a100-ts": sharing_config(TIME_SLICING), "mps-10": sharing_config(MPS)}, "a100-ts"
    )
    chosen = configs.for_node({"nvidia.com/device-plugin.config": "mps-10"})
    assert chosen.strategy == SharingStrategy.MPS


def test_a_node_without_the_label_runs_the_default_config() -> None:
    configs = SharingConfigs({"a100-ts": sharing_config(TIME_SLICING)}, "a100-ts")
    assert configs.for_node({"nvidia.com/gpu.present": "true"}).per_device() == 4


def test_without_a_default_a_node_without_the_label_shares_nothing() -> None:
    # The GPU operator runs the config manager with the "empty" fallback when no default is set.
    configs = SharingConfigs({"a100-ts": sharing_config(TIME_SLICING)})
    assert configs.for_node({}) == NO_SHARING


def test_a_label_naming_no_config_is_an_error_naming_label_and_value() -> None:
    configs = SharingConfigs({"a100-ts": sharing_config(TIME_SLICING)}, "a100-ts")
    with pytest.raises(SharingConfigError) as raised:
        configs.for_node({"nvidia.com/device-plugin.config": "t4-config"})
    assert str(raised.value) == (
        "node label nvidia.com/device-plugin.config: 't4-config' names no device plugin config (known: a100-ts)"
    )


def test_a_default_that_names_no_config_is_refused() -> None:
    with pytest.raises(SharingConfigError, match="default device plugin config 'missing' is not one of: a"):
        SharingConfigs({"a": SharingConfig()}, "missing")
