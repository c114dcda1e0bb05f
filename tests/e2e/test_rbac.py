"""Least privilege, proven: the daemon's end-to-end scenarios pass with only the RBAC rules that
``kubectl kustomize deploy/base`` renders, every request outside them gets 403, and every granted rule is used.

The scenarios are the ones in test_daemon_scenarios.py, run unchanged against an RBAC-enforcing fake API
server (tests/fakes/kube_rbac.py). Only the daemon's requests carry the service account's token and are
checked; the harness's scheduler stand-in and test setup act as cluster admin. Leader election is turned on
so the Lease rules are exercised too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.daemon import Daemon
from autoscaler.kube.client import make_api_client
from providers.simulated.node import NodeRegistrar
from tests.e2e import harness
from tests.e2e import test_daemon_scenarios as scenarios
from tests.fakes.kube_rbac import Grant, RbacApiServer, RbacEnforcer, RbacPolicy, service_account_user
from tests.fakes.kustomize import KUBECTL, find, render

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is needed to render deploy/"),
]

TOKEN = "tidal-service-account-token"
LEADER_ELECTION = {"enabled": True, "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "1s"}
SCENARIOS: dict[str, Callable[[Any], None]] = {
    "scale from zero": scenarios.test_scale_from_zero_for_one_gpu_pod,
    "KAI seed": scenarios.test_seed_scenario_kai_queues_launch_only_what_the_queues_may_use_and_go_back_to_zero,
    "drain": scenarios.test_an_underutilised_node_is_drained_once_its_pdb_allows_and_its_pods_fit_elsewhere,
}


def deployment_user(objects: list[dict[str, Any]]) -> str:
    """The user the rendered Deployment's pods authenticate as."""
    deployment = find(objects, "Deployment", "tidal")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    return service_account_user(deployment["metadata"]["namespace"], account)


def policy_of(directory: str) -> RbacPolicy:
    objects = render(directory)
    return RbacPolicy.from_objects(objects, deployment_user(objects))


class Usage:
    """Grants used and scenarios run, across the tests of this module."""

    def __init__(self) -> None:
        self.used: set[Grant] = set()
        self.ran: set[str] = set()


@pytest.fixture(scope="module")
def usage() -> Usage:
    return Usage()


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


@pytest.fixture
def enforce(monkeypatch: pytest.MonkeyPatch) -> Callable[..., RbacEnforcer]:
    """Make harness clusters enforce the RBAC rules rendered from a deploy/ directory on the daemon."""

    def install(directory: str = "deploy/base", *, registrar_as_daemon: bool = False) -> RbacEnforcer:
        policy = policy_of(directory)
        enforcer = RbacEnforcer(policy, tokens={TOKEN: policy.user})
        original_config = harness.base_config

        def with_election(**overrides: Any) -> dict[str, Any]:
            return original_config(**{"leaderElection": LEADER_ELECTION, **overrides})

        monkeypatch.setattr(harness, "FakeApiServer", lambda **kw: RbacApiServer(enforcer, **kw))
        monkeypatch.setattr(harness, "base_config", with_election)
        monkeypatch.setattr(harness.Cluster, "daemon", _daemon_with_token)
        if registrar_as_daemon:

            def registrar(api_client: Any, **kw: Any) -> NodeRegistrar:
                host = api_client.configuration.host
                return NodeRegistrar(make_api_client(host=host, token=TOKEN).api_client, **kw)

            monkeypatch.setattr(harness, "NodeRegistrar", registrar)
        return enforcer

    return install


def denials(enforcer: RbacEnforcer) -> list[str]:
    return sorted({r.describe() for r in enforcer.denied})


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_daemon_scenario_passes_with_only_the_base_rbac_rules(scenario, tmp_path, enforce, usage):
    enforcer = enforce()
    SCENARIOS[scenario](tmp_path)
    assert denials(enforcer) == []
    assert enforcer.allowed, "the daemon's requests were not identified"
    usage.used |= enforcer.used
    usage.ran.add(scenario)


def test_every_base_rbac_rule_is_used_by_the_scenarios(usage):
    if usage.ran != set(SCENARIOS):
        pytest.skip(f"needs every scenario of this module in the same run; ran {sorted(usage.ran)}")
    unused = [g.describe() for g in policy_of("deploy/base").unused(usage.used)]
    assert unused == [], "granted but never used:\n" + "\n".join(unused)


def test_a_request_outside_the_rules_is_forbidden(tmp_path, enforce):
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


def test_the_simulated_overlay_lets_the_daemon_register_its_own_nodes(tmp_path, enforce):
    enforcer = enforce("deploy/overlays/simulated", registrar_as_daemon=True)
    SCENARIOS["scale from zero"](tmp_path)
    assert denials(enforcer) == []
    simulated_only = {g for g in enforcer.policy.grants if g.role == "ClusterRole/tidal-simulated-nodes"}
    assert {g.describe() for g in simulated_only - enforcer.used} == set()
    assert {(g.resource, g.verb) for g in simulated_only} == {("nodes", "create"), ("nodes/status", "patch")}


def test_the_simulated_node_rules_are_needed_outside_the_base(tmp_path, enforce):
    enforcer = enforce("deploy/base", registrar_as_daemon=True)
    with harness.cluster(tmp_path) as c:
        c.daemon()
        c.api.create(harness.gpu_pod("infer-0"))
        for _ in range(10):
            c.step()
            if enforcer.denied:
                break
    assert "create core/nodes (cluster scope)" in denials(enforcer)
