"""MIG profiles, the GPUs that offer them, the GPU operator's layouts and what a node then advertises."""

from __future__ import annotations

import pytest

from autoscaler.core.gpu.mig import (
    MIG_GPUS,
    MigError,
    MigLayout,
    MigProfile,
    kai_quota_units,
    layout,
    mig_config_ready,
    mig_gpu,
    node_mig_resources,
    parse_profile,
)

A100_40 = MIG_GPUS["A100-40GB"]
A100_80 = MIG_GPUS["A100-80GB"]
H100 = MIG_GPUS["H100-80GB"]


@pytest.mark.parametrize(
    ("text", "profile"),
    [
        ("mig-3g.40gb", MigProfile(3, 40)),
        ("3g.40gb", MigProfile(3, 40)),
        ("nvidia.com/mig-1g.10gb", MigProfile(1, 10)),
        ("nvidia.com/mig-1g.10gb.me", MigProfile(1, 10, "+me")),
        ("1g.10gb+me", MigProfile(1, 10, "+me")),
        ("nvidia.com/mig-1g.24gb.me.all", MigProfile(1, 24, "+me.all")),
        ("1g.24gb-me", MigProfile(1, 24, "-me")),
        ("1c.3g.40gb", MigProfile(3, 40, "", 1)),
    ],
)
def test_a_mig_profile_is_read_from_its_name_or_resource(text: str, profile: MigProfile) -> None:
    assert parse_profile(text) == profile


def test_a_profile_is_3_compute_slices_and_40_gb() -> None:
    profile = parse_profile("mig-3g.40gb")
    assert (profile.slices, profile.memory_gb) == (3, 40)


def test_the_resource_name_writes_plus_as_a_dot_as_the_device_plugin_does() -> None:
    assert parse_profile("1g.10gb+me").resource == "nvidia.com/mig-1g.10gb.me"
    assert parse_profile("3g.40gb").resource == "nvidia.com/mig-3g.40gb"


@pytest.mark.parametrize("text", ["3g", "mig-3g.40", "mig-0g.5gb", "nvidia.com/gpu", "8c.3g.40gb"])
def test_a_name_that_is_no_profile_is_refused_with_its_value(text: str) -> None:
    with pytest.raises(MigError, match=repr(text)):
        parse_profile(text)


def test_kai_counts_a_mig_instance_against_quota_by_its_compute_slices() -> None:
    assert kai_quota_units("nvidia.com/mig-3g.40gb") == 3
    assert kai_quota_units("nvidia.com/mig-1g.10gb", 4) == 4
    assert kai_quota_units("nvidia.com/mig-7g.80gb", 2) == 14


def test_kai_counts_nothing_for_a_profile_name_it_does_not_parse() -> None:
    # KAI's regexp is ^nvidia.com/mig-(\d+)g\.(\d+)gb$: a media extension falls outside it.
    assert kai_quota_units("nvidia.com/mig-1g.10gb.me") == 0


def test_offering_gpus_are_matched_to_their_mig_gpu_by_model_and_memory() -> None:
    assert mig_gpu("A100", 40960) is A100_40
    assert mig_gpu("A100", 81920) is A100_80
    assert mig_gpu("H100", 81920) is H100
    assert mig_gpu("H100 NVL", 96256) is MIG_GPUS["H100-94GB"]
    assert mig_gpu("H200", 144384) is MIG_GPUS["H200-141GB"]
    assert mig_gpu("B200", 183359) is MIG_GPUS["B200-180GB"]


def test_gpus_without_mig_and_partial_gpus_have_no_mig_gpu() -> None:
    assert mig_gpu("L4", 22888) is None
    assert mig_gpu("T4", 16384) is None
    assert mig_gpu("RTX PRO 6000", 12288) is None  # a vGPU slice of the 96 GB card
    assert mig_gpu("RTX PRO 6000", 98304) is MIG_GPUS["RTX-PRO-6000-96GB"]


def test_which_gpus_support_which_profiles() -> None:
    assert A100_80.supports("3g.40gb") and H100.supports("mig-3g.40gb")
    assert not A100_40.supports("3g.40gb")
    assert A100_40.supports("3g.20gb")
    assert MIG_GPUS["A30-24GB"].supports("2g.12gb+me")


def test_all_1g_10gb_is_seven_instances_on_an_80gb_gpu_and_four_on_a_40gb_one() -> None:
    assert layout("all-1g.10gb", A100_80) == MigLayout(True, {"1g.10gb": 7})
    assert layout("all-1g.10gb", A100_40) == MigLayout(True, {"1g.10gb": 4})


def test_all_balanced_differs_by_gpu_as_in_the_gpu_operator() -> None:
    assert layout("all-balanced", A100_40) == MigLayout(True, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert layout("all-balanced", H100) == MigLayout(True, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    assert layout("all-balanced", MIG_GPUS["A30-24GB"]) == MigLayout(True, {"1g.6gb": 2, "2g.12gb": 1})


def test_a_media_extension_layout_holds_one_instance() -> None:
    assert layout("all-1g.10gb.me", H100) == MigLayout(True, {"1g.10gb+me": 1})


def test_all_disabled_leaves_the_gpus_whole_and_all_enabled_cuts_none() -> None:
    assert layout("all-disabled", H100) == MigLayout(False)
    assert layout("all-enabled", H100) == MigLayout(True, {})


def test_a_layout_the_gpu_cannot_take_is_none() -> None:
    assert layout("all-3g.40gb", A100_40) is None  # a 40 GB A100 has no 3g.40gb
    assert layout("my-own-layout", H100) is None


def test_every_default_layout_fits_every_gpu_it_is_for() -> None:
    for gpu in MIG_GPUS.values():
        for name in ["all-balanced", *("all-" + p.replace("+", ".") for p in gpu.profiles)]:
            assert layout(name, gpu) is not None, (gpu.name, name)


def test_a_custom_layout_is_used_when_it_fits_and_refused_when_it_does_not() -> None:
    custom = {
        "inference": MigLayout(True, {"3g.40gb": 1, "1g.10gb": 4}),
        "too-much": MigLayout(True, {"3g.40gb": 2, "1g.10gb": 2}),
        "too-many-of-one": MigLayout(True, {"3g.40gb": 3}),
    }
    assert layout("inference", H100, custom) == custom["inference"]
    assert layout("too-much", H100, custom) is None
    assert layout("too-many-of-one", H100, custom) is None


def test_a_mixed_strategy_node_advertises_each_profile_per_gpu() -> None:
    chosen = layout("all-balanced", H100)
    assert chosen is not None
    assert node_mig_resources(chosen, gpus=8) == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }


def test_a_single_strategy_node_advertises_every_instance_as_a_gpu() -> None:
    chosen = layout("all-1g.10gb", A100_80)
    assert chosen is not None
    assert node_mig_resources(chosen, gpus=8, strategy="single") == {"nvidia.com/gpu": 56}


def test_the_single_strategy_refuses_a_layout_of_several_profiles() -> None:
    chosen = layout("all-balanced", A100_80)
    assert chosen is not None
    with pytest.raises(MigError, match="single needs one profile per node"):
        node_mig_resources(chosen, gpus=8, strategy="single")


def test_a_disabled_layout_leaves_whole_gpus() -> None:
    assert node_mig_resources(MigLayout(False), gpus=4) == {"nvidia.com/gpu": 4}


def test_an_unknown_strategy_is_refused_by_name() -> None:
    with pytest.raises(MigError, match="'split' is not one of none, single, mixed"):
        node_mig_resources(MigLayout(False), gpus=4, strategy="split")


def test_a_node_is_cut_once_the_mig_manager_reports_success() -> None:
    assert mig_config_ready(
        {"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "success"}
    )
    assert not mig_config_ready(
        {"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "pending"}
    )
    assert not mig_config_ready({"nvidia.com/mig.config": "all-balanced"})
