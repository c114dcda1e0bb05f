"""KAI's own pods and its background pods, recognised from the namespaces and labels KAI gives them."""

from __future__ import annotations

from autoscaler.core.gpu.kai_pods import (
    gpu_groups,
    is_background,
    is_reservation_pod,
    is_scale_adjuster_pod,
    scaled_pod,
)

# As KAI's binder creates a reservation pod (pkg/binder/binding/resourcereservation).
RESERVATION_LABELS = {
    "app": "kai-resource-reservation",
    "runai-gpu-group": "0b7c1b8e-4f1d-4b7a-9a3c-1f2e3d4c5b6a",
}
# As KAI's node-scale-adjuster creates a scaling pod (pkg/nodescaleadjuster/scaler).
SCALING_LABELS = {
    "app": "scaling-pod",
    "shared-gpu-pod-name": "notebook-7",
    "shared-gpu-pod-namespace": "research",
}


def test_a_pod_labelled_background_true_is_a_background_pod() -> None:
    assert is_background({"kai.scheduler/background": "true", "kai.scheduler/queue": "maintenance"})


def test_background_matches_the_label_value_exactly_as_kais_selector_does() -> None:
    assert not is_background({"kai.scheduler/background": "True"})
    assert not is_background({"kai.scheduler/background": "false"})
    assert not is_background({"kai.scheduler/queue": "maintenance"})


def test_a_gpu_reservation_pod_is_recognised_in_its_namespace() -> None:
    assert is_reservation_pod("kai-resource-reservation", RESERVATION_LABELS)


def test_a_reservation_pod_with_a_custom_app_label_is_recognised_by_its_gpu_group() -> None:
    assert is_reservation_pod("kai-resource-reservation", {"app": "gpu-holder", "runai-gpu-group": "g-1"})


def test_the_same_labels_outside_the_reservation_namespace_are_not_a_reservation_pod() -> None:
    # A fractional workload pod carries the GPU-group label too once it is bound.
    assert not is_reservation_pod("research", {"runai-gpu-group": "g-1"})


def test_a_reservation_namespace_set_at_install_is_honoured() -> None:
    assert is_reservation_pod(
        "gpu-reservations", RESERVATION_LABELS, reservation_namespace="gpu-reservations"
    )
    assert not is_reservation_pod(
        "kai-resource-reservation", RESERVATION_LABELS, reservation_namespace="other"
    )


def test_a_pod_in_the_reservation_namespace_without_kai_labels_is_not_a_reservation_pod() -> None:
    assert not is_reservation_pod("kai-resource-reservation", {"app": "debug-shell"})


def test_a_scaling_pod_is_recognised_and_names_the_pod_it_stands_for() -> None:
    assert is_scale_adjuster_pod("kai-scale-adjust", SCALING_LABELS)
    assert scaled_pod(SCALING_LABELS) == ("research", "notebook-7")


def test_a_scaling_pod_in_another_namespace_is_recognised_by_its_shared_pod_labels() -> None:
    assert is_scale_adjuster_pod("autoscaling", {"shared-gpu-pod-name": "a", "shared-gpu-pod-namespace": "b"})


def test_a_scaling_pod_without_shared_pod_labels_is_recognised_by_namespace_and_app() -> None:
    assert is_scale_adjuster_pod("kai-scale-adjust", {"app": "scaling-pod"})
    assert not is_scale_adjuster_pod("kai-scale-adjust", {"app": "web"})
    assert scaled_pod({"app": "scaling-pod"}) is None


def test_an_ordinary_gpu_pod_is_neither_kind() -> None:
    labels = {"app": "trainer", "kai.scheduler/queue": "research"}
    assert not is_scale_adjuster_pod("research", labels)
    assert not is_reservation_pod("research", labels)


def test_gpu_groups_lists_every_device_a_multi_device_share_is_on() -> None:
    labels = {
        "runai-gpu-group": "g-b",
        "runai-gpu-group/g-a": "g-a",
        "runai-gpu-group/g-b": "g-b",
        "app": "x",
    }
    assert gpu_groups(labels) == ("g-a", "g-b")


def test_a_pod_sharing_no_gpu_has_no_gpu_group() -> None:
    assert gpu_groups({"app": "web"}) == ()
