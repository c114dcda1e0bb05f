"""KAI GPU shares read from pod annotations: the values KAI's own examples use, and the ones its admission
webhook refuses, each refused with one line naming the annotation and the value."""

from __future__ import annotations

import pytest

from autoscaler.core.gpu.share import (
    ComputeMode,
    GpuShare,
    GpuShareError,
    ShareSource,
    gpu_share,
    sharing_ready,
)

# KAI's docs/gpu-sharing examples: one container, or a workload between two sidecars.
ONE = ["gpu-workload"]
SIDECARS = ["sidecar", "gpu-workload", "another-sidecar"]


def test_a_pod_without_share_annotations_asks_for_no_share() -> None:
    assert gpu_share({"kai.scheduler/queue": "default-queue"}, ONE) is None


def test_gpu_fraction_is_half_of_one_device_for_the_first_container() -> None:
    share = gpu_share({"gpu-fraction": "0.5"}, SIDECARS)
    assert share == GpuShare(ShareSource.FRACTION, "sidecar", devices=1, portion=0.5)
    assert share.gpus() == 0.5


def test_gpu_fraction_container_name_gives_the_share_to_that_container() -> None:
    share = gpu_share({"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload"}, SIDECARS)
    assert share is not None and share.container == "gpu-workload"


def test_gpu_fraction_container_name_may_name_an_init_container() -> None:
    share = gpu_share(
        {"gpu-fraction": "0.25", "gpu-fraction-container-name": "warmup"}, ONE, init_containers=["warmup"]
    )
    assert share is not None and share.container == "warmup"


def test_gpu_fraction_in_scientific_notation_is_read_as_kai_reads_it() -> None:
    share = gpu_share({"gpu-fraction": "2.5e-1"}, ONE)
    assert share is not None and share.portion == 0.25


def test_kai_accounts_a_fraction_in_hundredths_of_a_gpu() -> None:
    share = gpu_share({"gpu-fraction": "0.333", "gpu-fraction-num-devices": "3"}, ONE)
    assert share is not None and share.hundredths == 33
    assert share.gpus() == pytest.approx(0.99)


def test_gpu_memory_is_mib_per_device() -> None:
    share = gpu_share({"gpu-memory": "2000"}, ONE)
    assert share == GpuShare(ShareSource.MEMORY, "gpu-workload", memory_mib=2000)
    assert share.portion_of(24576) == pytest.approx(2000 / 24576)
    assert share.gpus(24576) == pytest.approx(2000 / 24576)


def test_a_memory_share_larger_than_a_device_is_more_than_one_device_of_it() -> None:
    share = gpu_share({"gpu-memory": "30000"}, ONE)
    assert share is not None and share.portion_of(24576) > 1


def test_num_devices_repeats_the_share_on_each_device() -> None:
    share = gpu_share({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, ONE)
    assert share is not None and (share.devices, share.portion, share.gpus()) == (2, 0.5, 1.0)


def test_nvfractions_request_is_per_container_memory_in_kubernetes_quantities() -> None:
    share = gpu_share({"nvidia.com/container.gpu-workload.gpu-memory.request": "7680Mi"}, SIDECARS)
    assert share == GpuShare(ShareSource.NVFRACTIONS, "gpu-workload", memory_mib=7680)


def test_nvfractions_request_and_limit_schedule_by_the_request() -> None:
    share = gpu_share(
        {
            "nvidia.com/container.gpu-workload.gpu-memory.request": "4096Mi",
            "nvidia.com/container.gpu-workload.gpu-memory.limit": "8192Mi",
        },
        ONE,
    )
    assert share is not None and (share.memory_mib, share.memory_limit_mib) == (4096, 8192)


def test_an_nvfractions_limit_alone_is_also_the_request() -> None:
    share = gpu_share({"nvidia.com/container.gpu-workload.gpu-memory.limit": "8Gi"}, ONE)
    assert share is not None and (share.memory_mib, share.memory_limit_mib) == (8192, 8192)


def test_an_nvfractions_request_in_decimal_units_is_rounded_up_to_whole_mib() -> None:
    share = gpu_share({"nvidia.com/container.gpu-workload.gpu-memory.request": "1G"}, ONE)
    assert share is not None and share.memory_mib == 954  # 10^9 bytes = 953.67 MiB


def test_nvfractions_with_num_devices_asks_for_the_memory_on_each_device() -> None:
    share = gpu_share(
        {"nvidia.com/container.gpu-workload.gpu-memory.request": "7680Mi", "gpu-fraction-num-devices": "2"},
        ONE,
    )
    assert share is not None and (share.devices, share.memory_mib) == (2, 7680)


def test_an_nvfractions_request_wins_over_gpu_fraction_as_in_kai() -> None:
    share = gpu_share(
        {"nvidia.com/container.gpu-workload.gpu-memory.request": "1Gi", "gpu-fraction": "0.25"}, ONE
    )
    assert share is not None and share.source == ShareSource.NVFRACTIONS and share.portion is None


def test_gpu_memory_beside_an_equal_nvfractions_request_is_accepted() -> None:
    share = gpu_share(
        {"nvidia.com/container.gpu-workload.gpu-memory.request": "2Gi", "gpu-memory": "2048"}, ONE
    )
    assert share is not None and share.memory_mib == 2048


def test_the_compute_mode_defaults_to_time_slicing() -> None:
    share = gpu_share({"gpu-fraction": "0.5"}, ONE)
    assert share is not None and share.compute_mode == ComputeMode.TIME_SLICING


def test_the_per_container_compute_mode_is_read() -> None:
    share = gpu_share(
        {
            "nvidia.com/container.gpu-workload.gpu-memory.request": "4Gi",
            "nvidia.com/container.gpu-workload.gpu-compute.mode": "sm-sharing",
        },
        ONE,
    )
    assert share is not None and share.compute_mode == ComputeMode.SM_SHARING


def test_the_pod_wide_compute_mode_of_kais_guide_is_read_too() -> None:
    share = gpu_share({"gpu-fraction": "0.5", "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing"}, ONE)
    assert share is not None and share.compute_mode == ComputeMode.SM_SHARING


def test_the_devices_annotation_kais_binder_writes_on_a_bound_pod_is_not_a_request() -> None:
    share = gpu_share(
        {
            "nvidia.com/container.gpu-workload.gpu-memory.request": "4Gi",
            "nvidia.com/container.gpu-workload.gpus.devices": "GPU-5b1c2d3e",
        },
        ONE,
    )
    assert share is not None and share.ignored == ()


def test_an_nvfractions_annotation_tidal_does_not_know_is_reported_not_read() -> None:
    share = gpu_share(
        {
            "nvidia.com/container.gpu-workload.gpu-memory.request": "4Gi",
            "nvidia.com/container.gpu-workload.gpu-compute.request": "0.3",
        },
        ONE,
    )
    assert share is not None and share.ignored == ("nvidia.com/container.gpu-workload.gpu-compute.request",)


def test_a_compute_mode_alone_asks_for_no_share() -> None:
    assert gpu_share({"nvidia.com/container.gpu-workload.gpu-compute.mode": "sm-sharing"}, ONE) is None


def test_an_empty_gpu_fraction_is_absent_as_in_kai() -> None:
    assert gpu_share({"gpu-fraction": ""}, ONE) is None


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {"gpu-fraction": "1.5"},
            "annotation gpu-fraction: '1.5' is not above 0 and below 1 (a share of one GPU; ask for whole GPUs "
            "with nvidia.com/gpu)",
            id="fraction-above-one",
        ),
        pytest.param(
            {"gpu-fraction": "1"},
            "annotation gpu-fraction: '1' is not above 0 and below 1 (a share of one GPU; ask for whole GPUs "
            "with nvidia.com/gpu)",
            id="fraction-of-one-is-refused-by-kai",
        ),
        pytest.param(
            {"gpu-fraction": "0"},
            "annotation gpu-fraction: '0' is not above 0 and below 1 (a share of one GPU; ask for whole GPUs "
            "with nvidia.com/gpu)",
            id="fraction-zero",
        ),
        pytest.param(
            {"gpu-fraction": "abc"},
            "annotation gpu-fraction: 'abc' is not a decimal number (e.g. '0.5')",
            id="fraction-not-a-number",
        ),
        pytest.param(
            {"gpu-fraction": "-0.5"},
            "annotation gpu-fraction: '-0.5' is not a decimal number (e.g. '0.5')",
            id="fraction-negative",
        ),
        pytest.param(
            {"gpu-fraction": "NaN"},
            "annotation gpu-fraction: 'NaN' is not a decimal number (e.g. '0.5')",
            id="fraction-nan",
        ),
        pytest.param(
            {"gpu-fraction": " 0.5"},
            "annotation gpu-fraction: ' 0.5' is not a decimal number (e.g. '0.5')",
            id="fraction-with-space",
        ),
        pytest.param(
            {"gpu-memory": "-2000"},
            "annotation gpu-memory: '-2000' is not a whole number of MiB above 0",
            id="memory-negative",
        ),
        pytest.param(
            {"gpu-memory": "0"},
            "annotation gpu-memory: '0' is not a whole number of MiB above 0",
            id="memory-zero",
        ),
        pytest.param(
            {"gpu-memory": "2Gi"},
            "annotation gpu-memory: '2Gi' is not a whole number of MiB above 0",
            id="memory-with-unit",
        ),
        pytest.param(
            {"gpu-fraction": "0.5", "gpu-memory": "2000"},
            "annotation gpu-memory: '2000' is set beside gpu-fraction (ask for one of them)",
            id="fraction-and-memory",
        ),
        pytest.param(
            {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1.5"},
            "annotation gpu-fraction-num-devices: '1.5' is not a whole number of GPUs above 0",
            id="num-devices-not-whole",
        ),
        pytest.param(
            {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"},
            "annotation gpu-fraction-num-devices: '0' is not a whole number of GPUs above 0",
            id="num-devices-zero",
        ),
        pytest.param(
            {"gpu-fraction-num-devices": "2"},
            "annotation gpu-fraction-num-devices: '2' is set without gpu-fraction, gpu-memory or an NvFractions "
            "memory request (it multiplies one of them)",
            id="num-devices-alone",
        ),
        pytest.param(
            {"gpu-fraction": "0.5", "gpu-fraction-container-name": "trainer"},
            "annotation gpu-fraction-container-name: 'trainer' is not a container of this pod",
            id="container-name-unknown",
        ),
        pytest.param(
            {"nvidia.com/container.trainer.gpu-memory.request": "4Gi"},
            "annotation nvidia.com/container.trainer.gpu-memory.request: container 'trainer' is not a container "
            "of this pod",
            id="nvfractions-unknown-container",
        ),
        pytest.param(
            {"nvidia.com/container..gpu-memory.request": "4Gi"},
            "annotation nvidia.com/container..gpu-memory.request: names no container (expected "
            "nvidia.com/container.<name>.gpu-memory.request)",
            id="nvfractions-empty-container",
        ),
        pytest.param(
            {"nvidia.com/container.gpu-workload.gpu-memory.request": "lots"},
            "annotation nvidia.com/container.gpu-workload.gpu-memory.request: 'lots' is not a memory quantity "
            "(e.g. '7680Mi')",
            id="nvfractions-not-a-quantity",
        ),
        pytest.param(
            {"nvidia.com/container.gpu-workload.gpu-memory.request": "-1Gi"},
            "annotation nvidia.com/container.gpu-workload.gpu-memory.request: '-1Gi' is not above 0",
            id="nvfractions-negative",
        ),
        pytest.param(
            {
                "nvidia.com/container.gpu-workload.gpu-memory.request": "8Gi",
                "nvidia.com/container.gpu-workload.gpu-memory.limit": "4Gi",
            },
            "annotation nvidia.com/container.gpu-workload.gpu-memory.request: 8192 MiB is above the limit of "
            "4096 MiB",
            id="nvfractions-request-above-limit",
        ),
        pytest.param(
            {"nvidia.com/container.gpu-workload.gpu-memory.limit": "4Gi", "gpu-fraction": "0.5"},
            "annotation nvidia.com/container.gpu-workload.gpu-memory.limit: an NvFractions limit cannot be "
            "combined with gpu-fraction or gpu-memory",
            id="nvfractions-limit-and-fraction",
        ),
        pytest.param(
            {"nvidia.com/container.gpu-workload.gpu-memory.request": "2Gi", "gpu-memory": "1024"},
            "annotation gpu-memory: 1024 MiB disagrees with nvidia.com/container.gpu-workload.gpu-memory.request "
            "(2048 MiB)",
            id="nvfractions-and-different-gpu-memory",
        ),
        pytest.param(
            {"gpu-fraction": "0.5", "nvidia.com/container.gpu-workload.gpu-compute.mode": "exclusive"},
            "annotation nvidia.com/container.gpu-workload.gpu-compute.mode: 'exclusive' is not one of "
            "time-slicing, sm-sharing",
            id="compute-mode-unknown",
        ),
        pytest.param(
            {
                "gpu-fraction": "0.5",
                "nvidia.com/container.gpu-workload.gpu-compute.mode": "sm-sharing",
                "kai.scheduler/gpu-compute-sharing-mode": "time-slicing",
            },
            "annotation kai.scheduler/gpu-compute-sharing-mode: 'time-slicing' disagrees with "
            "nvidia.com/container.gpu-workload.gpu-compute.mode 'sm-sharing' (one pod has one compute mode)",
            id="compute-modes-disagree",
        ),
    ],
)
def test_a_share_kai_would_refuse_is_one_line_naming_the_annotation_and_value(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(GpuShareError) as raised:
        gpu_share(annotations, ONE)
    assert str(raised.value) == message
    assert "\n" not in str(raised.value)


def test_two_containers_with_nvfractions_requests_are_refused() -> None:
    with pytest.raises(GpuShareError, match="only one container of a pod may ask for a GPU share"):
        gpu_share(
            {
                "nvidia.com/container.sidecar.gpu-memory.request": "1Gi",
                "nvidia.com/container.gpu-workload.gpu-memory.request": "4Gi",
            },
            SIDECARS,
        )


def test_a_share_beside_a_whole_gpu_request_is_refused() -> None:
    with pytest.raises(
        GpuShareError, match="annotation gpu-fraction: a GPU share cannot be combined with a whole"
    ):
        gpu_share({"gpu-fraction": "0.5"}, ONE, requests_whole_gpu=True)


def test_gpu_fraction_container_name_must_match_the_nvfractions_container() -> None:
    with pytest.raises(GpuShareError, match="'sidecar' is not 'gpu-workload', the container the NvFractions"):
        gpu_share(
            {
                "nvidia.com/container.gpu-workload.gpu-memory.request": "4Gi",
                "gpu-fraction-container-name": "sidecar",
            },
            SIDECARS,
        )


def test_a_memory_share_needs_the_device_memory_to_count_against_a_quota() -> None:
    share = gpu_share({"gpu-memory": "2000"}, ONE)
    assert share is not None
    with pytest.raises(ValueError, match="device of known memory"):
        share.gpus()


def test_a_node_is_ready_for_nvfractions_only_when_its_sharing_condition_is_true() -> None:
    assert sharing_ready({"Ready": "True", "gpu-sharing.nvidia.com/Ready": "True"})
    assert not sharing_ready({"Ready": "True", "gpu-sharing.nvidia.com/Ready": "False"})
    assert not sharing_ready({"Ready": "True"})


def test_the_older_gpu_fractioning_condition_name_is_read_too() -> None:
    assert sharing_ready({"gpu-fractioning.nvidia.com/Ready": "True"})
