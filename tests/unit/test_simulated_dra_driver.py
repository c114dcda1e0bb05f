"""The simulated DRA driver publishes a DRA node's GPUs as NVIDIA's driver does: one ResourceSlice, owned by
the Node, one device per GPU with NVML's attributes and the GPU's memory."""

from __future__ import annotations

from providers.simulated.devices import is_dra_node, resource_slice
from tests.builders import offering

NODE_UID = "0b6c2f1e-8d4a-4f57-9a51-3c2b7f0e9d11"


def test_each_gpu_of_a_dra_node_is_a_device_with_nvmls_attributes_and_its_memory() -> None:
    g4dn = offering("g4dn.12xlarge", 48, 192, 3.912, gpus=4, gpu_model="T4", gpu_memory_gib=16)
    published = resource_slice("sim-1", NODE_UID, g4dn)
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == ("gpu.nvidia.com", "sim-1", "sim-1")
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    device = spec["devices"][0]
    assert device["attributes"]["type"] == {"string": "gpu"}
    assert device["attributes"]["productName"] == {"string": "Tesla T4"}
    assert device["attributes"]["architecture"] == {"string": "Turing"}
    assert device["attributes"]["cudaComputeCapability"] == {"version": "7.5.0"}
    assert device["capacity"] == {"memory": {"value": "16384Mi"}}
    uuids = {d["attributes"]["uuid"]["string"] for d in spec["devices"]}
    assert len(uuids) == 4 and all(u.startswith("GPU-") for u in uuids)


def test_the_slice_is_owned_by_its_node_so_it_goes_with_it() -> None:
    g4dn = offering("g4dn.xlarge", 4, 16, 0.526, gpus=1, gpu_model="T4", gpu_memory_gib=16)
    [owner] = resource_slice("sim-1", NODE_UID, g4dn)["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "v1", "kind": "Node", "name": "sim-1", "uid": NODE_UID, "controller": True}


def test_a_gpu_the_catalog_cannot_tell_apart_is_published_as_one_real_form() -> None:
    p4d = offering("p4de.24xlarge", 96, 1152, 40.96, gpus=8, gpu_model="A100", gpu_memory_gib=80)
    device = resource_slice("sim-1", NODE_UID, p4d)["spec"]["devices"][0]
    assert device["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}


def test_only_nodes_labelled_for_dra_run_the_driver() -> None:
    assert is_dra_node({"tidal.dev/gpu-allocation": "dra"})
    assert not is_dra_node({"nvidia.com/gpu.present": "true"})
