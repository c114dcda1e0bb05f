"""GCE accelerator types as the planner sees them, and the names of N1 + attached-GPU offerings."""

import pytest

from autoscaler.config.schema import label_value_problem
from autoscaler.core.fit import gpu_model_name
from autoscaler.core.offering import instance_family
from providers.gcp.gpus import accelerator, attached_name, split_attached_name


@pytest.mark.parametrize(
    ("accelerator_type", "model", "memory_gib"),
    [
        ("nvidia-tesla-t4", "T4", 16),
        ("nvidia-tesla-v100", "V100", 16),
        ("nvidia-tesla-p100", "P100", 16),
        ("nvidia-tesla-p4", "P4", 8),
        ("nvidia-l4", "L4", 24),
        ("nvidia-tesla-a100", "A100", 40),
        ("nvidia-a100-80gb", "A100", 80),
        ("nvidia-h100-80gb", "H100", 80),
        ("nvidia-h100-mega-80gb", "H100", 80),
    ],
)
def test_accelerator_types_become_the_planners_model_names_with_memory(
    accelerator_type: str, model: str, memory_gib: int
) -> None:
    found = accelerator(f"projects/p/zones/z/acceleratorTypes/{accelerator_type}")
    assert found is not None
    assert (found.model, found.memory_mib) == (model, memory_gib * 1024)
    assert gpu_model_name(found.model) == model


def test_virtual_workstation_types_are_not_accelerators_tidal_offers() -> None:
    assert accelerator("nvidia-tesla-t4-vws") is None


def test_an_unknown_nvidia_type_gets_its_model_and_memory_from_the_name() -> None:
    found = accelerator("nvidia-x300-96gb")
    assert found is not None and (found.model, found.memory_mib) == ("X300", 96 * 1024)


def test_attached_gpu_offerings_are_named_machine_type_accelerator_count_and_split_back() -> None:
    name = attached_name("n1-standard-8", "nvidia-tesla-t4", 2)
    assert name == "n1-standard-8_nvidia-tesla-t4x2"
    assert split_attached_name(name) == ("n1-standard-8", "nvidia-tesla-t4", 2)
    assert split_attached_name("a2-highgpu-1g") == ("a2-highgpu-1g", "", 0)


def test_an_attached_gpu_offering_name_is_a_valid_node_label_value_in_the_n1_family() -> None:
    name = attached_name("n1-highmem-96", "nvidia-tesla-v100", 8)
    assert label_value_problem(name) is None
    assert instance_family(name) == "n1"
