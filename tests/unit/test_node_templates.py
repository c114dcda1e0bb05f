"""Each provider says what a node of its offerings looks like (labels, taints, kubelet reservation), and the
core plans with that template whoever built it: a cloud tidal ships or a provider installed beside it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autoscaler.cli.catalog_files import read_catalogs
from autoscaler.config.options import Config
from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import ON_DEMAND, SPOT, Taint
from autoscaler.core.new_nodes import node_labels, node_taints
from autoscaler.core.offering import Offering
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.resources import CPU, MEMORY, MIB, Resources
from autoscaler.runtime.catalog import offering_templates, with_templates
from providers.aws import offering_template as eks_template
from providers.azure import offering_template as aks_template
from providers.gcp import offering_template as gke_template
from providers.simulated import offering_template as simulated_template
from tests.builders import INSUFFICIENT_GPU, pod, snapshot

NOW = 1_800_000_000.0

G5_SPOT = Offering(
    "g5.xlarge", "us-east-1a", SPOT, vcpu=4, memory_mib=16384, price=0.45, gpu_count=1, gpu_model="A10G",
    gpu_vendor="NVIDIA", gpu_memory_mib=24576, gpu_fraction=1.0, max_pods=58, region="us-east-1",
)  # fmt: skip
N1_T4_SPOT = Offering(
    "n1-standard-4", "us-central1-a", SPOT, vcpu=4, memory_mib=15360, price=0.16, gpu_count=1,
    gpu_model="T4", gpu_vendor="NVIDIA", gpu_memory_mib=16384, gpu_fraction=1.0, region="us-central1",
)  # fmt: skip
NC4_T4_SPOT = Offering(
    "Standard_NC4as_T4_v3", "eastus-1", SPOT, vcpu=4, memory_mib=28672, price=0.16, gpu_count=1,
    gpu_model="T4", gpu_vendor="NVIDIA", gpu_memory_mib=16384, gpu_fraction=1.0, max_pods=30, region="eastus",
)  # fmt: skip


def reserved(cpu_milli: int, memory_mib: int) -> Resources:
    return Resources({CPU: cpu_milli, MEMORY: memory_mib * MIB})


# --- what each cloud's provider says ----------------------------------------------------------------


def test_an_eks_spot_gpu_node_carries_the_eks_and_karpenter_capacity_labels() -> None:
    labels = dict(eks_template(G5_SPOT).labels)
    assert labels["eks.amazonaws.com/capacityType"] == "SPOT"
    assert labels["karpenter.sh/capacity-type"] == "spot"


def test_an_eks_node_reserves_the_eks_ami_formula() -> None:
    # cpu: 6% of the first core, 1% of the second, 0.5% of the next two = 60m + 10m + 10m;
    # memory: 255 MiB + 11 MiB x 58 pods = 893 MiB, plus the 100 MiB hard eviction threshold.
    assert eks_template(G5_SPOT).reserved == reserved(80, 993)


def test_a_gke_spot_gpu_node_carries_gkes_provisioning_spot_and_accelerator_labels() -> None:
    labels = dict(gke_template(N1_T4_SPOT).labels)
    assert labels["cloud.google.com/gke-provisioning"] == "spot"
    assert labels["cloud.google.com/gke-spot"] == "true"
    assert labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"


def test_a_gke_a100_node_is_named_by_its_memory() -> None:
    a100 = Offering("a2-ultragpu-1g", "us-central1-a", ON_DEMAND, 12, 174080, 5.0, gpu_count=1,
                    gpu_model="A100", gpu_memory_mib=81920)  # fmt: skip
    assert dict(gke_template(a100).labels)["cloud.google.com/gke-accelerator"] == "nvidia-a100-80gb"


def test_a_gke_node_reserves_gkes_published_formula() -> None:
    # cpu as on EKS (80m for 4 cores); memory: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 7
    # of 15 GiB = 1024 + 819 + 716 MiB, plus the 100 MiB hard eviction threshold.
    assert gke_template(N1_T4_SPOT).reserved == reserved(80, 2660)


def test_an_aks_spot_gpu_node_carries_the_scale_set_priority_label_and_the_aks_spot_taint() -> None:
    template = aks_template(NC4_T4_SPOT)
    labels = dict(template.labels)
    assert labels["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert labels["accelerator"] == "nvidia"
    assert template.taints == (Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),)


def test_an_aks_on_demand_node_is_regular_and_untainted() -> None:
    template = aks_template(Offering("Standard_D4s_v5", "eastus-1", ON_DEMAND, 4, 16384, 0.19))
    assert dict(template.labels)["kubernetes.azure.com/scalesetpriority"] == "regular"
    assert template.taints == ()


def test_an_aks_node_reserves_aks_published_formula() -> None:
    # cpu: 140m for up to 4 cores; memory: 20 MiB x 30 pods + 50 MiB = 650 MiB (under a quarter of 28 GiB),
    # plus the 100 MiB hard eviction threshold.
    assert aks_template(NC4_T4_SPOT).reserved == reserved(140, 750)


def test_a_simulated_node_has_no_cloud_labels_and_tidals_default_reservation() -> None:
    template = simulated_template(N1_T4_SPOT)
    assert (template.labels, template.taints) == ((), ())
    assert template.reserved == gke_template(N1_T4_SPOT).reserved


# --- how the core reads them ------------------------------------------------------------------------


def test_the_core_adds_its_own_labels_and_taints_to_the_template(make_config: Callable[..., Config]) -> None:
    config = make_config(cloud="azure", region="eastus", zones=[], nodeLabels={"team": "ml"})
    o = with_templates([NC4_T4_SPOT], aks_template)[0]
    labels = node_labels(o, config)
    assert labels["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert (labels["tidal.dev/gpu-model"], labels["team"]) == ("T4", "ml")
    assert node_taints(o, config) == (
        Taint("nvidia.com/gpu", "present", "NoSchedule"),
        Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),
    )


def test_an_offering_without_a_template_gets_no_cloud_labels_and_tidals_default_reservation(
    make_config: Callable[..., Config],
) -> None:
    labels = node_labels(G5_SPOT, make_config())
    assert not [k for k in labels if "eks.amazonaws.com" in k or "karpenter" in k]
    reserved = simulated_template(G5_SPOT).reserved
    assert reserved is not None
    assert node_allocatable(G5_SPOT) == G5_SPOT.capacity() - reserved


def test_tidal_plan_gives_catalog_offerings_the_configured_clouds_templates(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(cloud="gcp", region="us-central1", zones=["us-central1-a"])
    catalogs = read_catalogs(["config/catalogs/gcp-us-central1.csv"], config)
    spot_l4 = next(o for o in catalogs.offerings if o.gpu_model == "L4" and o.capacity_type == SPOT)
    assert spot_l4.template == gke_template(spot_l4)
    assert dict(spot_l4.template.labels)["cloud.google.com/gke-accelerator"] == "nvidia-l4"


def test_equal_templates_are_shared_by_the_offerings_that_have_them() -> None:
    a, b = with_templates([G5_SPOT, G5_SPOT], eks_template)
    assert a.template is b.template


# --- a provider tidal does not ship -----------------------------------------------------------------

ACME_MODULE = """
from autoscaler.core.model import Taint
from autoscaler.core.offering import NodeTemplate
from autoscaler.core.resources import Resources


def offering_template(offering):
    pool = "gpu" if offering.gpu_count else "cpu"
    return NodeTemplate(
        labels=(("acme.example/pool", pool),),
        taints=(Taint("acme.example/dedicated", "ml", "NoSchedule"),),
        reserved=Resources({"cpu": 500, "memory": 2048 * 2**20 * 1000}),
    )


class AcmeProvider:
    name = "acme"
"""


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A provider for the Acme cloud installed beside tidal: a distribution with a ``tidal.providers`` entry
    point, as ``pip install acme-tidal`` would leave it."""
    (tmp_path / "acme_nodes.py").write_text(ACME_MODULE)
    dist = tmp_path / "acme_tidal-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tidal\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tidal.providers]\nacme = acme_nodes:AcmeProvider\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    monkeypatch.delitem(__import__("sys").modules, "acme_nodes", raising=False)


def test_a_third_party_providers_templates_are_found_by_its_entry_point(acme_installed: None) -> None:
    builder = offering_templates("acme")
    assert builder is not None
    assert dict(builder(G5_SPOT).labels) == {"acme.example/pool": "gpu"}


def test_the_core_plans_with_a_third_party_providers_template(
    acme_installed: None, make_config: Callable[..., Config]
) -> None:
    config = make_config(cloud="acme", region="us-east-1", zones=[], capacityTypes=["spot"])
    builder = offering_templates("acme")
    assert builder is not None
    offerings = with_templates([G5_SPOT], builder)
    wanted = pod(
        "train-1",
        cpu="1",
        memory="4Gi",
        gpu=1,
        message=INSUFFICIENT_GPU,
        node_selector={"acme.example/pool": "gpu"},
        tolerations=[{"key": "acme.example/dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    )
    untolerating = pod("train-2", cpu="1", memory="4Gi", gpu=1, message=INSUFFICIENT_GPU)
    result = plan(PlanInput(snapshot(wanted, untolerating), offerings, config, NOW))
    assert [la.pods for la in result.launch.launches] == [("default/train-1",)]
    assert [u.pod for u in result.launch.unplaced] == ["default/train-2"]
    index = OfferingIndex(offerings, config)
    assert index.base_allocatable(offerings[0]) == G5_SPOT.capacity() - Resources(
        {CPU: 500, MEMORY: 2048 * MIB}
    )


def test_no_template_builder_for_a_cloud_no_provider_is_registered_for() -> None:
    assert offering_templates("no-such-cloud") is None


@pytest.mark.parametrize(
    ("cloud", "sdk"), [("aws", "boto3"), ("gcp", "google.cloud"), ("azure", "azure.mgmt")]
)
def test_a_providers_templates_load_without_its_cloud_sdk(cloud: str, sdk: str) -> None:
    # Offline `tidal plan` reads templates for a catalog of any cloud; the cloud's extra may not be installed.
    code = (
        f"import sys, providers.{cloud} as p\n"
        "p.offering_template\n"
        f"assert not [m for m in sys.modules if m == {sdk!r} or m.startswith({sdk!r} + '.')], 'sdk loaded'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
