"""The simulated cloud provider: offerings from a catalog, launches, capacity, quota, lifecycle, config."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cloud import (
    CapacityUnavailable,
    CloudProvider,
    InstanceNotFound,
    ProviderError,
    QuotaExceeded,
    ReportsNodeLead,
    Throttled,
    available_providers,
    load_provider,
)
from autoscaler.config.options import Config, ConfigError
from autoscaler.core.model import (
    LABEL_CLUSTER,
    LABEL_LAUNCH_TOKEN,
    LABEL_MANAGED,
    ON_DEMAND,
    SPOT,
    Arch,
    Taint,
)
from autoscaler.core.offering import LaunchRequest, Offering
from providers.simulated import TERMINATED_RETENTION, ProviderConfigError, SimulatedProvider

HEADER = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone"
)
ROWS = [
    "aws,us-east-1,m5.xlarge,4,16384,0,0,,,,x86_64,0.192,0.08,",
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,0.45,",
    "aws,us-east-1,g5.12xlarge,48,196608,4,4,NVIDIA,A10G,98304,x86_64,5.672,,",  # no spot price
    "aws,us-east-1,m7g.large,2,8192,0,0,,,,arm64,0.0816,0.035,us-east-1b",  # one zone only
    "aws,us-west-2,m5.xlarge,4,16384,0,0,,,,x86_64,0.192,0.07,",
    "gcp,us-central1,n1-standard-4,4,15360,0,0,,,,x86_64,0.19,0.04,",
]


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.csv"
    path.write_text("\n".join([HEADER, *ROWS]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim_config(make_config: Callable[..., Config], catalog: Path) -> Callable[..., Config]:
    """A Config whose ``simulated:`` section reads the test catalog; keyword args add or override keys."""

    def build(section: dict[str, Any] | None = None, **top: Any) -> Config:
        simulated = {"catalog": str(catalog), **(section or {})}
        top.setdefault("zones", ["us-east-1a", "us-east-1b"])
        return make_config(simulated=simulated, **top)

    return build


@pytest.fixture
def provider(sim_config: Callable[..., Config], clock: FakeClock) -> SimulatedProvider:
    return SimulatedProvider(sim_config(), clock=clock)


def offering(p: SimulatedProvider, key: str) -> Offering:
    return next(o for o in p.offerings() if o.key == key)


def request(p: SimulatedProvider, token: str, *keys: str, **extra: Any) -> LaunchRequest:
    return LaunchRequest(token=token, offerings=tuple(offering(p, k) for k in keys), **extra)


# --- offerings ----------------------------------------------------------------------------------------


def test_offerings_are_the_catalog_rows_of_the_cloud_and_region_in_the_configured_zones(
    provider: SimulatedProvider,
) -> None:
    keys = {o.key for o in provider.offerings()}

    assert keys == {
        *(
            f"{t}/{z}/{c}"
            for t in ("m5.xlarge", "g5.xlarge")
            for z in ("us-east-1a", "us-east-1b")
            for c in (SPOT, ON_DEMAND)
        ),
        "g5.12xlarge/us-east-1a/on-demand",
        "g5.12xlarge/us-east-1b/on-demand",
        "m7g.large/us-east-1b/spot",
        "m7g.large/us-east-1b/on-demand",
    }
    g5 = offering(provider, "g5.xlarge/us-east-1a/spot")
    assert (g5.vcpu, g5.memory_mib, g5.gpu_count, g5.gpu_model, g5.price, g5.region) == (
        4,
        16384,
        1,
        "A10G",
        0.45,
        "us-east-1",
    )
    assert offering(provider, "m7g.large/us-east-1b/spot").arch is Arch.ARM64
    assert all(o.available for o in provider.offerings())


def test_without_configured_zones_a_zone_less_row_expands_to_three_zones_of_the_region(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(sim_config(zones=[]), clock=clock)

    zones = {o.zone for o in p.offerings() if o.instance_type == "m5.xlarge"}
    assert zones == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert {o.zone for o in p.offerings() if o.instance_type == "m7g.large"} == {"us-east-1b"}


def test_a_row_with_a_zone_outside_the_configured_zones_is_not_offered(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(sim_config(zones=["us-east-1a"]), clock=clock)

    assert not [o for o in p.offerings() if o.instance_type == "m7g.large"]


def test_catalog_cloud_and_region_can_be_chosen_and_zones_follow_the_clouds_naming(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(sim_config({"catalogCloud": "gcp"}, zones=[]), clock=clock)

    assert {o.key for o in p.offerings() if o.capacity_type == SPOT} == {
        "n1-standard-4/us-central1-a/spot",
        "n1-standard-4/us-central1-b/spot",
        "n1-standard-4/us-central1-c/spot",
    }
    west = SimulatedProvider(sim_config({"catalogRegion": "us-west-2"}, zones=[]), clock=clock)
    assert offering(west, "m5.xlarge/us-west-2a/spot").price == 0.07


def test_cloud_simulated_needs_catalog_cloud_when_the_file_has_several_clouds(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    with pytest.raises(ProviderConfigError, match=r"simulated\.catalogCloud: not set.*aws, gcp.*'simulated'"):
        SimulatedProvider(sim_config(cloud="simulated"), clock=clock)


def test_fail_capacity_marks_matching_offerings_unavailable_until_restored(
    provider: SimulatedProvider,
) -> None:
    provider.fail_capacity(instance_type="g5.xlarge", capacity_type=SPOT)

    unavailable = {o.key for o in provider.offerings() if not o.available}
    assert unavailable == {"g5.xlarge/us-east-1a/spot", "g5.xlarge/us-east-1b/spot"}

    provider.restore_capacity(instance_type="g5.xlarge", zone="us-east-1b")
    assert {o.key for o in provider.offerings() if not o.available} == {"g5.xlarge/us-east-1a/spot"}

    provider.restore_capacity()
    assert all(o.available for o in provider.offerings())


def test_capacity_failures_from_config_apply_from_the_start_and_can_be_restored(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    failures = [
        {"instanceType": "g5.xlarge", "zone": "us-east-1a", "capacityType": "spot"},
        {"zone": "us-east-1b"},
    ]
    p = SimulatedProvider(sim_config({"capacityFailures": failures}), clock=clock)

    unavailable = {o.key for o in p.offerings() if not o.available}
    assert "g5.xlarge/us-east-1a/spot" in unavailable
    assert {o.zone for o in p.offerings() if not o.available} == {"us-east-1a", "us-east-1b"}
    assert {o.key for o in p.offerings() if o.zone == "us-east-1a" and not o.available} == {
        "g5.xlarge/us-east-1a/spot"
    }

    p.restore_capacity(zone="us-east-1b")
    assert {o.key for o in p.offerings() if not o.available} == {"g5.xlarge/us-east-1a/spot"}


# --- launch -------------------------------------------------------------------------------------------


def test_launch_takes_the_first_candidate_with_capacity(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    provider.fail_capacity(instance_type="g5.xlarge", zone="us-east-1a", capacity_type=SPOT)
    req = request(
        provider,
        "tok-1",
        "g5.xlarge/us-east-1a/spot",
        "g5.xlarge/us-east-1b/spot",
        "g5.xlarge/us-east-1a/on-demand",
        labels={"team": "ml"},
        taints=(Taint("nvidia.com/gpu", "true"),),
        tags={"CostCenter": "42"},
    )

    instance = provider.launch(req)

    assert (instance.instance_type, instance.zone, instance.capacity_type) == (
        "g5.xlarge",
        "us-east-1b",
        SPOT,
    )
    assert instance.id.startswith("sim-") and len(instance.id) == 12
    int(instance.id[4:], 16)
    assert instance.provider_id == f"simulated:///us-east-1b/{instance.id}"
    assert (instance.state, instance.launch_token, instance.created) == ("pending", "tok-1", clock.now)
    assert (instance.price, instance.gpu_count) == (0.45, 1)
    assert instance.tags == {
        "CostCenter": "42",
        LABEL_CLUSTER: "tidal",
        LABEL_MANAGED: "true",
        LABEL_LAUNCH_TOKEN: "tok-1",
    }
    assert provider.calls[-1] == (
        "launch",
        "token=tok-1 offerings=g5.xlarge/us-east-1a/spot,g5.xlarge/us-east-1b/spot,g5.xlarge/us-east-1a/on-demand",
    )


def test_launch_uses_the_clouds_own_availability_not_the_stale_flag_in_the_request(
    provider: SimulatedProvider,
) -> None:
    req = request(provider, "tok-1", "m5.xlarge/us-east-1a/spot")  # available=True when the request was built
    provider.fail_capacity(instance_type="m5.xlarge")

    with pytest.raises(CapacityUnavailable):
        provider.launch(req)


def test_capacity_unavailable_lists_every_candidate_without_capacity(provider: SimulatedProvider) -> None:
    provider.fail_capacity(instance_type="g5.xlarge")
    req = request(provider, "tok-1", "g5.xlarge/us-east-1a/spot", "g5.xlarge/us-east-1b/on-demand")

    with pytest.raises(CapacityUnavailable) as caught:
        provider.launch(req)

    assert [o.key for o in caught.value.offerings] == [
        "g5.xlarge/us-east-1a/spot",
        "g5.xlarge/us-east-1b/on-demand",
    ]
    assert provider.instances() == []


def test_the_same_token_returns_the_same_instance_and_creates_nothing(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    req = request(provider, "tok-1", "m5.xlarge/us-east-1a/spot")
    first = provider.launch(req)
    clock.tick(1)

    again = provider.launch(req)

    assert again == first
    assert len(provider.instances()) == 1
    other = provider.launch(request(provider, "tok-2", "m5.xlarge/us-east-1a/spot"))
    assert other.id != first.id
    assert len(provider.instances()) == 2


def test_instance_ids_are_deterministic_for_a_seed(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    def ids(seed: int) -> list[str]:
        p = SimulatedProvider(sim_config(), clock=clock, seed=seed)
        return [p.launch(request(p, f"t{i}", "m5.xlarge/us-east-1a/spot")).id for i in range(3)]

    assert ids(7) == ids(7)
    assert ids(7) != ids(8)
    assert len(set(ids(7))) == 3


def test_launch_rejects_offerings_this_cloud_does_not_sell(provider: SimulatedProvider) -> None:
    alien = Offering("p5.48xlarge", "us-east-1a", SPOT, vcpu=192, memory_mib=2_097_152, price=30.0)

    with pytest.raises(ProviderError, match=r"not offered here: p5\.48xlarge/us-east-1a/spot"):
        provider.launch(LaunchRequest(token="t", offerings=(alien,)))
    with pytest.raises(ProviderError, match="no candidate offerings"):
        provider.launch(LaunchRequest(token="t", offerings=()))


def test_gpu_quota_counts_instances_not_terminated(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(sim_config({"quotaGPUs": 5}), clock=clock)
    big = p.launch(request(p, "big", "g5.12xlarge/us-east-1a/on-demand"))
    p.launch(request(p, "one", "g5.xlarge/us-east-1a/spot"))

    with pytest.raises(QuotaExceeded, match="GPU quota of 5"):
        p.launch(request(p, "two", "g5.xlarge/us-east-1a/spot"))
    assert (
        p.launch(request(p, "cpu", "m5.xlarge/us-east-1a/spot")).gpu_count == 0
    )  # CPU nodes are not limited

    p.terminate(big)
    assert p.launch(request(p, "two", "g5.xlarge/us-east-1a/spot")).state == "pending"


def test_quota_skips_a_candidate_that_would_exceed_it_for_one_that_does_not(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(sim_config({"quotaGPUs": 1}), clock=clock)

    instance = p.launch(request(p, "t", "g5.12xlarge/us-east-1a/on-demand", "g5.xlarge/us-east-1a/on-demand"))

    assert instance.instance_type == "g5.xlarge"


# --- lifecycle ----------------------------------------------------------------------------------------


def test_an_instance_is_pending_until_the_launch_delay_has_passed(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    launched = provider.launch(request(provider, "t", "m5.xlarge/us-east-1a/spot"))

    clock.tick(1.9)
    assert [i.state for i in provider.instances()] == ["pending"]
    clock.tick(0.1)
    assert [i.state for i in provider.instances()] == ["running"]
    assert provider.instances()[0].id == launched.id


def test_a_zero_launch_delay_starts_running(sim_config: Callable[..., Config], clock: FakeClock) -> None:
    p = SimulatedProvider(sim_config({"launchDelay": "0s"}), clock=clock)

    assert p.launch(request(p, "t", "m5.xlarge/us-east-1a/spot")).state == "running"


def test_terminate_is_idempotent_and_terminated_instances_are_listed_for_ten_minutes(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    instance = provider.launch(request(provider, "t", "m5.xlarge/us-east-1a/spot"))
    clock.tick(5)

    provider.terminate(instance)
    provider.terminate(instance)

    assert [i.state for i in provider.instances()] == ["terminated"]
    clock.tick(TERMINATED_RETENTION - 1)
    assert [i.state for i in provider.instances()] == ["terminated"]
    clock.tick(1)
    assert provider.instances() == []
    with pytest.raises(InstanceNotFound):  # forgotten entirely: the contract's typed not-found
        provider.terminate(instance)


def test_interrupt_reclaims_an_instance(provider: SimulatedProvider, clock: FakeClock) -> None:
    instance = provider.launch(request(provider, "t", "g5.xlarge/us-east-1a/spot"))
    clock.tick(10)

    reclaimed = provider.interrupt(instance.id)

    assert reclaimed.state == "terminated"
    assert [i.state for i in provider.instances()] == ["terminated"]
    with pytest.raises(KeyError):
        provider.interrupt("sim-00000000")


def test_instances_are_found_by_the_cluster_tag(
    sim_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    shared = {"stateFile": str(tmp_path / "cloud.json")}
    ours = SimulatedProvider(sim_config(shared), clock=clock)
    theirs = SimulatedProvider(sim_config(shared, clusterName="other"), clock=clock)

    mine = ours.launch(request(ours, "t1", "m5.xlarge/us-east-1a/spot"))
    foreign = theirs.launch(request(theirs, "t1", "m5.xlarge/us-east-1a/spot"))

    assert [i.id for i in ours.instances()] == [mine.id]
    assert [i.id for i in theirs.instances()] == [foreign.id]
    assert foreign.id != mine.id
    with pytest.raises(ProviderError, match="belongs to cluster 'other'"):
        ours.terminate(foreign)


def test_two_providers_on_one_state_file_share_the_cloud(
    sim_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    config = sim_config({"stateFile": str(tmp_path / "cloud.json")})
    leader, follower = SimulatedProvider(config, clock=clock), SimulatedProvider(config, clock=clock)

    launched = leader.launch(request(leader, "t1", "m5.xlarge/us-east-1a/spot"))
    follower.fail_capacity(zone="us-east-1a")

    assert follower.launch(request(follower, "t1", "m5.xlarge/us-east-1a/spot")) == launched
    assert [i.id for i in follower.instances()] == [launched.id]
    assert not offering(leader, "m5.xlarge/us-east-1a/spot").available
    follower.terminate(launched)
    assert [i.state for i in leader.instances()] == ["terminated"]


def test_injected_errors_are_raised_by_the_next_calls(provider: SimulatedProvider) -> None:
    provider.inject_error("launch", Throttled(2.0), count=2)
    req = request(provider, "t", "m5.xlarge/us-east-1a/spot")

    for _ in range(2):
        with pytest.raises(Throttled):
            provider.launch(req)
    assert provider.launch(req).state == "pending"
    with pytest.raises(ValueError, match="'reboot' is not one of"):
        provider.inject_error("reboot", ProviderError("x"))


def test_calls_are_recorded_for_assertions(provider: SimulatedProvider) -> None:
    instance = provider.launch(request(provider, "t", "m5.xlarge/us-east-1a/spot"))
    provider.terminate(instance)
    provider.instances()

    assert [c[0] for c in provider.calls] == ["offerings", "launch", "terminate", "instances"]
    assert provider.calls[2] == ("terminate", instance.id)


def test_start_advances_time_in_a_background_thread(sim_config: Callable[..., Config]) -> None:
    clock = FakeClock()
    p = SimulatedProvider(sim_config(), clock=clock)
    p.launch(request(p, "t", "m5.xlarge/us-east-1a/spot"))

    def states() -> list[str]:  # look at the cloud without calling a public method (they advance too)
        with p._store.transaction() as state:
            return [r.state for r in state.instances.values()]

    p.start(interval=0.01)
    try:
        clock.tick(3)
        deadline = time.monotonic() + 5
        while states() != ["running"] and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        p.stop()
    assert states() == ["running"]


# --- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"launchDely": "2s"}, "simulated.launchDely: unknown key (did you mean 'launchDelay'?)"),
        ({"launchDelay": "soon"}, "simulated.launchDelay: 'soon' is not a duration"),
        ({"registrationDelay": -1}, "simulated.registrationDelay: -1 is below 0"),
        ({"registerNodes": "yes"}, "simulated.registerNodes: 'yes' is not true or false"),
        ({"quotaGPUs": -2}, "simulated.quotaGPUs: -2 is below 0"),
        ({"quotaGPUs": "eight"}, "simulated.quotaGPUs: 'eight' is not an integer"),
        ({"capacityFailures": "g5.xlarge"}, "simulated.capacityFailures: 'g5.xlarge' is not a list"),
        (
            {"capacityFailures": [{"instanceTyp": "g5.xlarge"}]},
            "simulated.capacityFailures[0].instanceTyp: unknown key",
        ),
        (
            {"capacityFailures": [{"capacityType": "spots"}]},
            "simulated.capacityFailures[0].capacityType: 'spots' is not one of",
        ),
        (
            {"capacityFailures": [{"instanceType": "g5.xlarg"}]},
            "simulated.capacityFailures[0]: g5.xlarg/*/* matches no offering",
        ),
        (
            {"catalog": "/nonexistent/catalog.csv"},
            "simulated.catalog: '/nonexistent/catalog.csv': No such file",
        ),
        ({"catalog": None}, "simulated.catalog: null is not a string"),
        ({"catalogCloud": "oracle"}, "simulated.catalogCloud: 'oracle' has no rows in"),
        ({"catalogRegion": "mars-1"}, "simulated.catalogRegion: 'mars-1' has no rows in"),
        ({"stateFile": "/nonexistent/dir/state.json"}, "simulated.stateFile: cannot open"),
    ],
)
def test_bad_settings_give_one_line_naming_the_key_and_value(
    sim_config: Callable[..., Config], clock: FakeClock, section: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        SimulatedProvider(sim_config(section), clock=clock)

    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(message), text
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ConfigError)


def test_every_problem_is_reported_at_once(sim_config: Callable[..., Config], clock: FakeClock) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        SimulatedProvider(sim_config({"launchDelay": "x", "gpuReadyDelay": "y"}), clock=clock)

    assert caught.value.errors[0].startswith("simulated.launchDelay")
    assert caught.value.errors[1].startswith("simulated.gpuReadyDelay")


def test_the_catalog_is_required(make_config: Callable[..., Config], clock: FakeClock) -> None:
    with pytest.raises(ProviderConfigError, match=r"^simulated\.catalog: required"):
        SimulatedProvider(make_config(), clock=clock)


def test_a_catalog_without_the_required_columns_is_rejected(
    make_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("cloud,region,instance_type\naws,us-east-1,m5.xlarge\n", encoding="utf-8")

    with pytest.raises(ProviderConfigError, match=r"^simulated\.catalog: .*missing columns vcpu"):
        SimulatedProvider(make_config(simulated={"catalog": str(bad)}), clock=clock)


def test_a_corrupt_state_file_is_reported_as_a_setting_problem(
    sim_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    state = tmp_path / "cloud.json"
    state.write_text("{not json", encoding="utf-8")

    with pytest.raises(ProviderConfigError, match=r"^simulated\.stateFile: .*is not a state document"):
        SimulatedProvider(sim_config({"stateFile": str(state)}), clock=clock)


# --- registration as a plugin -------------------------------------------------------------------------


def test_the_provider_loads_through_the_entry_point(sim_config: Callable[..., Config]) -> None:
    assert "simulated" in available_providers()

    p = load_provider("simulated", sim_config())

    assert isinstance(p, SimulatedProvider)
    assert isinstance(p, CloudProvider)
    assert p.name == "simulated"


def test_concurrent_launches_through_one_state_file_lose_nothing(
    sim_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    config = sim_config({"stateFile": str(tmp_path / "cloud.json")})
    replicas = [SimulatedProvider(config, clock=clock) for _ in range(2)]  # each holds its own flock

    def launch_many(p: SimulatedProvider, prefix: str) -> None:
        for i in range(20):
            p.launch(request(p, f"{prefix}-{i}", "m5.xlarge/us-east-1a/spot"))

    threads = [threading.Thread(target=launch_many, args=(p, f"r{n}")) for n, p in enumerate(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    listed = replicas[0].instances()
    assert len(listed) == 40
    assert len({i.id for i in listed}) == 40
    assert {i.launch_token for i in listed} == {f"r{n}-{i}" for n in range(2) for i in range(20)}


SHARED_CATALOG = Path(__file__).resolve().parents[3] / "shared" / "data" / "catalog" / "instance_catalog.csv"


@pytest.mark.skipif(not SHARED_CATALOG.exists(), reason="the shared instance catalog is not on this machine")
def test_the_shared_catalog_offers_real_gpu_instances(
    make_config: Callable[..., Config], clock: FakeClock
) -> None:
    config = make_config(
        cloud="simulated", zones=[], simulated={"catalog": str(SHARED_CATALOG), "catalogCloud": "aws"}
    )
    p = SimulatedProvider(config, clock=clock)

    g5 = next(o for o in p.offerings() if o.key == "g5.xlarge/us-east-1a/spot")
    assert (g5.gpu_count, g5.gpu_model, g5.region) == (1, "A10G", "us-east-1")
    assert p.catalog.zones == ("us-east-1a", "us-east-1b", "us-east-1c")
    instance = p.launch(LaunchRequest(token="t", offerings=(g5,)))
    assert instance.gpu_count == 1


# --- configured spot interruptions ---------------------------------------------------------------------


def test_spot_instances_get_a_notice_at_the_configured_rate_and_are_reclaimed_after_the_notice_period(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    settings = {"launchDelay": 0, "spotInterruptionRate": 60, "spotInterruptionNotice": "2m"}  # ~1 a minute
    p = SimulatedProvider(sim_config(settings), clock=clock)
    spot = p.launch(request(p, "s", "g5.xlarge/us-east-1a/spot"))
    on_demand = p.launch(request(p, "o", "g5.xlarge/us-east-1a/on-demand"))
    with p._store.transaction() as state:
        notice_at = p.interruption_notice_at(state.instances[spot.id])
        assert p.interruption_notice_at(state.instances[on_demand.id]) is None  # only spot is reclaimed
    assert notice_at is not None and notice_at > clock.now

    clock.now = notice_at - 0.001
    assert p.interrupted_instances() == []
    clock.now = notice_at
    assert [i.id for i in p.interrupted_instances()] == [spot.id]  # the two-minute warning, once
    assert p.interrupted_instances() == []
    assert {i.id: i.state for i in p.instances()}[spot.id] == "running"  # still running during the notice
    clock.now = notice_at + 120
    assert {i.id: i.state for i in p.instances()} == {spot.id: "terminated", on_demand.id: "running"}


def test_configured_interruptions_are_the_same_for_a_seed_and_differ_between_seeds(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    def notice_times(seed: int) -> list[float]:
        p = SimulatedProvider(
            sim_config({"launchDelay": 0, "spotInterruptionRate": 1}), clock=clock, seed=seed
        )
        ids = [p.launch(request(p, f"t{i}", "m5.xlarge/us-east-1a/spot")).id for i in range(5)]
        with p._store.transaction() as state:
            notices = [p.interruption_notice_at(state.instances[i]) for i in ids]
            assert all(n is not None for n in notices)
            return [n - clock.now for n in notices if n is not None]

    first = notice_times(1)
    assert notice_times(1) == first
    assert notice_times(2) != first
    assert 0 < sum(first) / len(first) < 4 * 3600  # about an hour each on average at 1 per instance-hour


def test_without_a_rate_no_instance_is_ever_interrupted(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    provider.launch(request(provider, "s", "g5.xlarge/us-east-1a/spot"))
    clock.tick(365 * 24 * 3600)
    assert provider.interrupted_instances() == []
    assert [i.state for i in provider.instances()] == ["running"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"spotInterruptionRate": -1}, "simulated.spotInterruptionRate: -1 is below 0"),
        ({"spotInterruptionNotice": "soon"}, "simulated.spotInterruptionNotice:"),
    ],
)
def test_bad_interruption_settings_name_the_key(
    sim_config: Callable[..., Config], clock: FakeClock, section: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        SimulatedProvider(sim_config(section), clock=clock)
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_node_takes_pods_after_the_launch_and_registration_delays_and_a_gpu_node_after_its_gpus_too(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p = SimulatedProvider(
        sim_config({"launchDelay": "2s", "registrationDelay": "3s", "gpuReadyDelay": "5s"}), clock=clock
    )

    assert isinstance(p, ReportsNodeLead)
    assert p.node_lead(offering(p, "m5.xlarge/us-east-1a/spot")) == 5.0
    assert p.node_lead(offering(p, "g5.xlarge/us-east-1a/spot")) == 10.0


# --- what an advance looks at --------------------------------------------------------------------------


def kubelet_cloud(sim_config: Callable[..., Config], clock: FakeClock) -> tuple[SimulatedProvider, Any]:
    from autoscaler.sim.cluster import EmulatedCluster

    cluster = EmulatedCluster(clock)
    registrar: Any = cluster  # the emulated cluster takes the kubelets' writes as the simulator runs it
    return SimulatedProvider(sim_config(), clock=clock, kube=registrar), cluster


def test_nodes_register_and_report_gpus_at_their_times_between_other_launches(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p, cluster = kubelet_cloud(sim_config, clock)
    gpu = p.launch(request(p, "a", "g5.xlarge/us-east-1a/on-demand"))
    clock.tick(4.9)
    p.launch(request(p, "b", "m5.xlarge/us-east-1a/on-demand"))  # advances: nothing due yet
    assert list(cluster.nodes) == []
    clock.tick(0.1)  # launch delay 2 s + registration 3 s
    p.advance()
    assert list(cluster.nodes) == [gpu.id]
    assert cluster.nodes[gpu.id].allocatable.gpus == 0
    clock.tick(5)  # the GPUs are ready 5 s after registration; the second node registers too
    p.advance()
    assert cluster.nodes[gpu.id].allocatable.gpus == 1
    assert len(cluster.nodes) == 2


def test_a_node_goes_not_ready_at_the_next_advance_after_its_instance_is_terminated(
    sim_config: Callable[..., Config], clock: FakeClock
) -> None:
    p, cluster = kubelet_cloud(sim_config, clock)
    first = p.launch(request(p, "a", "m5.xlarge/us-east-1a/on-demand"))
    second = p.launch(request(p, "b", "m5.xlarge/us-east-1a/on-demand"))
    clock.tick(10)
    p.advance()
    p.advance()  # nothing more is due
    p.terminate(second)
    p.terminate(first)
    p.advance()  # the same moment: the two ended instances are the only ones with something due
    assert [cluster.nodes[i.id].ready for i in (first, second)] == [False, False]
    assert sorted(i.state for i in p.instances()) == ["terminated", "terminated"]


def test_the_listing_follows_launches_terminations_and_forgotten_instances(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    a = provider.launch(request(provider, "a", "m5.xlarge/us-east-1a/spot"))
    assert [(i.id, i.state) for i in provider.instances()] == [(a.id, "pending")]
    clock.tick(1)
    b = provider.launch(request(provider, "b", "m5.xlarge/us-east-1a/spot"))
    listed = provider.instances()
    listed.clear()  # a caller's copy: the cloud's listing is not changed through it
    assert [i.id for i in provider.instances()] == [a.id, b.id]
    provider.terminate(a)
    assert [(i.id, i.state) for i in provider.instances()] == [(a.id, "terminated"), (b.id, "pending")]
    clock.tick(TERMINATED_RETENTION)
    assert [(i.id, i.state) for i in provider.instances()] == [(b.id, "running")]


def test_the_live_ids_are_those_of_the_listing_not_terminated(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    a = provider.launch(request(provider, "a", "m5.xlarge/us-east-1a/spot"))
    clock.tick(1)
    b = provider.launch(request(provider, "b", "m5.xlarge/us-east-1a/spot"))
    assert provider.live_ids() == {a.id, b.id}
    provider.terminate(a)
    assert provider.live_ids() == {b.id} == {i.id for i in provider.instances() if i.state != "terminated"}
    clock.tick(TERMINATED_RETENTION)
    provider.interrupt(b.id)
    assert provider.live_ids() == set()


def test_a_cloud_that_looks_only_at_what_is_due_writes_the_nodes_one_that_looks_at_every_instance_writes(
    sim_config: Callable[..., Config], clock: FakeClock, tmp_path: Path
) -> None:
    from autoscaler.sim.cluster import EmulatedCluster

    delays = {"launchDelay": "2s", "registrationDelay": "3s", "gpuReadyDelay": "5s"}
    kept, whole = EmulatedCluster(clock), EmulatedCluster(clock)
    registrar: Any = kept
    in_memory = SimulatedProvider(sim_config(delays), clock=clock, kube=registrar)
    registrar = whole  # a state file is read anew in every transaction: each advance looks at every instance
    on_file = SimulatedProvider(
        sim_config({**delays, "stateFile": str(tmp_path / "cloud.json")}), clock=clock, kube=registrar
    )
    for step in range(40):
        for p in (in_memory, on_file):
            if step % 3 == 0:
                shape = "g5.xlarge/us-east-1a/on-demand" if step % 2 else "m5.xlarge/us-east-1a/on-demand"
                p.launch(request(p, f"t{step}", shape))
            if step in (12, 25):
                p.terminate(next(i for i in p.instances() if i.state != "terminated"))
            p.advance()
        assert [(n.name, n.ready, n.allocatable.gpus) for n in kept.nodes.values()] == [
            (n.name, n.ready, n.allocatable.gpus) for n in whole.nodes.values()
        ]
        assert [(i.id, i.state) for i in in_memory.instances()] == [
            (i.id, i.state) for i in on_file.instances()
        ]
        clock.tick(1.5)
    assert len(kept.nodes) == 12  # the last two launches are still coming up
    assert [n.ready for n in kept.nodes.values()].count(False) == 2


def test_instances_launched_at_one_moment_are_listed_by_id_after_the_older_ones(
    provider: SimulatedProvider, clock: FakeClock
) -> None:
    first = provider.launch(request(provider, "first", "m5.xlarge/us-east-1a/spot"))
    clock.tick(1)
    batch = [provider.launch(request(provider, f"t{i}", "m5.xlarge/us-east-1a/spot")) for i in range(8)]
    assert [i.id for i in batch] != sorted(i.id for i in batch)  # launched out of id order
    assert [i.id for i in provider.instances()] == [first.id, *sorted(i.id for i in batch)]
    clock.tick(1)
    last = provider.launch(request(provider, "last", "m5.xlarge/us-east-1a/spot"))
    assert [i.id for i in provider.instances()] == [first.id, *sorted(i.id for i in batch), last.id]
