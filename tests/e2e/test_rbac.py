"""Least privilege, proven: the daemon's end-to-end scenarios pass with only the RBAC rules that the chart
(charts/tidal) renders, every request outside them gets 403, and every granted rule is used.

Every scenario of test_daemon_scenarios.py (but those marked xfail) runs unchanged against an RBAC-enforcing
fake API server (tests/fakes/kube_rbac.py). Only the daemon's requests carry the service account's token and
are checked; the harness's scheduler stand-in and test setup act as cluster admin. Leader election is turned
on so the Lease rules are exercised too. One session fixture runs them all and records what each used, so
the unused-rule check always sees every scenario, whichever tests were selected.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.runtime.daemon import Daemon
from autoscaler.runtime.kube.client import make_api_client
from providers.simulated.node import NodeRegistrar
from tests.e2e import harness
from tests.e2e import test_daemon_scenarios as scenarios
from tests.fakes.helm_chart import find, render
from tests.fakes.kube_rbac import Grant, RbacApiServer, RbacEnforcer, RbacPolicy, service_account_user

pytestmark = pytest.mark.slow

TOKEN = "tidal-service-account-token"
LEADER_ELECTION = {"enabled": True, "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "1s"}


def _expected_to_fail(fn: Callable[..., Any]) -> bool:
    return any(mark.name == "xfail" for mark in getattr(fn, "pytestmark", ()))


# Every daemon scenario, by its test name; the RBAC proof covers each one.
SCENARIOS: dict[str, Callable[..., None]] = {
    name: fn
    for name, fn in vars(scenarios).items()
    if name.startswith("test_") and callable(fn) and not _expected_to_fail(fn)
}


def deployment_user(objects: list[dict[str, Any]]) -> str:
    """The user the rendered Deployment's pods authenticate as."""
    deployment = find(objects, "Deployment", "tidal")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    return service_account_user(deployment["metadata"]["namespace"], account)


def policy_of(*examples: str) -> RbacPolicy:
    """The rules the chart renders with its defaults, or with the named examples' values."""
    objects = render(examples=examples)
    return RbacPolicy.from_objects(objects, deployment_user(objects))


def _daemon_with_token(self: harness.Cluster, *, identity: str = "tidal-0", dry_run: bool = False) -> Daemon:
    """harness.Cluster.daemon, with the client authenticating as tidal's service account."""
    client = make_api_client(host=self.api.url, token=TOKEN)
    daemon = Daemon(
        str(self.config_path),
        client,
        self.provider,
        dry_run=dry_run,
        identity=identity,
        metrics_address="127.0.0.1:0",
    )
    daemon.start(serve=False, sync_timeout=20)
    self.daemons.append(daemon)
    return daemon


def install_rbac(
    monkeypatch: pytest.MonkeyPatch, *examples: str, registrar_as_daemon: bool = False
) -> RbacEnforcer:
    """Make harness clusters enforce the RBAC rules the chart renders (with the examples' values) on the
    daemon."""
    policy = policy_of(*examples)
    enforcer = RbacEnforcer(policy, tokens={TOKEN: policy.user})
    original_config = harness.base_config

    def with_election(**overrides: Any) -> dict[str, Any]:
        # A scenario's own leaderElection options go on top of the election turned on here.
        election = {**LEADER_ELECTION, **(overrides.pop("leaderElection", None) or {})}
        return original_config(leaderElection=election, **overrides)

    monkeypatch.setattr(harness, "FakeApiServer", lambda **kw: RbacApiServer(enforcer, **kw))
    monkeypatch.setattr(harness, "base_config", with_election)
    monkeypatch.setattr(harness.Cluster, "daemon", _daemon_with_token)
    if registrar_as_daemon:

        def registrar(api_client: Any, **kw: Any) -> NodeRegistrar:
            host = api_client.configuration.host
            return NodeRegistrar(make_api_client(host=host, token=TOKEN).api_client, **kw)

        monkeypatch.setattr(harness, "NodeRegistrar", registrar)
    return enforcer


@pytest.fixture
def enforce(monkeypatch: pytest.MonkeyPatch) -> Callable[..., RbacEnforcer]:
    def install(*examples: str, registrar_as_daemon: bool = False) -> RbacEnforcer:
        return install_rbac(monkeypatch, *examples, registrar_as_daemon=registrar_as_daemon)

    return install


def denials(enforcer: RbacEnforcer) -> list[str]:
    return sorted({r.describe() for r in enforcer.denied})


@dataclass
class ScenarioRun:
    """One scenario under the base rules: what it was denied, what it used, and how it ended."""

    denied: list[str] = field(default_factory=list)
    used: set[Grant] = field(default_factory=set)
    identified: bool = False
    failure: str = ""


class Output(NamedTuple):
    out: str
    err: str


class Captured:
    """capsys for a scenario run outside its own test: what it wrote to stdout and stderr since the last read."""

    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self) -> Output:
        result = Output(self.out.getvalue(), self.err.getvalue())
        for stream in (self.out, self.err):
            stream.seek(0)
            stream.truncate()
        return result


def run_scenario(fn: Callable[..., None], tmp_path: Path) -> ScenarioRun:
    """Run a scenario function with the fixtures it asks for (tmp_path, monkeypatch, capsys) under
    enforcement."""
    run = ScenarioRun()
    captured = Captured()
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        contextlib.redirect_stdout(captured.out),
        contextlib.redirect_stderr(captured.err),
    ):
        enforcer = install_rbac(monkeypatch)
        fixtures = {"tmp_path": tmp_path, "monkeypatch": monkeypatch, "capsys": captured}
        kwargs = {name: fixtures[name] for name in inspect.signature(fn).parameters}
        try:
            fn(**kwargs)
        except Exception:
            run.failure = traceback.format_exc()
    run.denied, run.used, run.identified = denials(enforcer), set(enforcer.used), bool(enforcer.allowed)
    return run


@pytest.fixture(scope="session")
def scenario_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ScenarioRun]]:
    """Every daemon scenario, run once under the base rules, whichever of the tests below were selected."""
    yield {name: run_scenario(fn, tmp_path_factory.mktemp(name[5:40])) for name, fn in SCENARIOS.items()}


def test_the_rbac_proof_covers_every_daemon_scenario() -> None:
    names = {n for n in vars(scenarios) if n.startswith("test_")}
    expected_failures = {n for n in names if _expected_to_fail(getattr(scenarios, n))}
    assert set(SCENARIOS) == names - expected_failures
    assert len(SCENARIOS) >= 15


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_daemon_scenario_passes_with_only_the_base_rbac_rules(
    scenario: str, scenario_runs: dict[str, ScenarioRun]
) -> None:
    run = scenario_runs[scenario]
    assert run.denied == []
    if run.failure:
        pytest.fail(f"the scenario failed under the base rules:\n{run.failure}", pytrace=False)
    assert run.identified, "the daemon's requests were not identified"


def test_every_base_rbac_rule_is_used_by_the_scenarios(scenario_runs: dict[str, ScenarioRun]) -> None:
    used = set().union(*(run.used for run in scenario_runs.values()))
    unused = [g.describe() for g in policy_of().unused(used)]
    assert unused == [], "granted but never used:\n" + "\n".join(unused)


def test_a_request_outside_the_rules_is_forbidden(
    tmp_path: Path, enforce: Callable[..., RbacEnforcer]
) -> None:
    enforcer = enforce()
    with harness.cluster(tmp_path) as c:
        d = c.daemon()
        c.api.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"}}
        )
        with pytest.raises(ApiException) as raised:
            d.client.call(d.client.core.read_namespaced_secret, "s", "default")
        assert raised.value.status == 403
    assert denials(enforcer) == ["get core/secrets s (namespace default)"]


def test_the_simulated_cloud_lets_the_daemon_register_its_own_nodes(
    tmp_path: Path, enforce: Callable[..., RbacEnforcer]
) -> None:
    enforcer = enforce("simulated", registrar_as_daemon=True)
    scenarios.test_scale_from_zero_for_one_gpu_pod(tmp_path)
    assert denials(enforcer) == []
    simulated_only = {g for g in enforcer.policy.grants if g.role == "ClusterRole/tidal-simulated-nodes"}
    assert {g.describe() for g in simulated_only - enforcer.used} == set()
    assert {(g.resource, g.verb) for g in simulated_only} == {("nodes", "create"), ("nodes/status", "patch")}


def test_the_simulated_node_rules_are_needed_outside_the_base(
    tmp_path: Path, enforce: Callable[..., RbacEnforcer]
) -> None:
    enforcer = enforce(registrar_as_daemon=True)
    with harness.cluster(tmp_path) as c:
        c.daemon()
        c.api.create(harness.gpu_pod("infer-0"))
        for _ in range(10):
            c.step()
            if enforcer.denied:
                break
    assert "create core/nodes (cluster scope)" in denials(enforcer)
