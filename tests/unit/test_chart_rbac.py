"""What the RBAC rules the chart renders allow tidal's service account, request by request, as the
Kubernetes RBAC authorizer would decide (tests/fakes/kube_rbac.py); on the real API server,
tests/e2e/control_plane/test_least_privilege.py checks the daemon against the same rules."""

from __future__ import annotations

import pytest

from tests.fakes.helm_chart import render
from tests.fakes.kube_rbac import RbacPolicy, RbacRequest, service_account_user

TIDAL = service_account_user("tidal-system", "tidal")


@pytest.fixture(scope="module")
def policy() -> RbacPolicy:
    return RbacPolicy.from_objects(render(), TIDAL)


def allowed(
    policy: RbacPolicy,
    verb: str,
    resource: str,
    *,
    group: str = "",
    sub: str = "",
    namespace: str = "",
    name: str = "",
    user: str = TIDAL,
) -> bool:
    return bool(policy.matching(RbacRequest(user, verb, group, resource, sub, namespace, name)))


def test_tidal_reads_and_renews_its_own_lease_only(policy: RbacPolicy) -> None:
    lease = {"group": "coordination.k8s.io", "namespace": "tidal-system"}
    assert allowed(policy, "get", "leases", name="tidal", **lease)
    assert allowed(policy, "update", "leases", name="tidal", **lease)
    assert not allowed(policy, "update", "leases", name="kube-scheduler", **lease)
    assert not allowed(
        policy, "get", "leases", group="coordination.k8s.io", namespace="kube-system", name="tidal"
    )


def test_tidal_creates_configmaps_only_in_its_namespace_and_updates_only_its_status(
    policy: RbacPolicy,
) -> None:
    assert allowed(policy, "create", "configmaps", namespace="tidal-system")
    assert allowed(policy, "update", "configmaps", namespace="tidal-system", name="tidal-status")
    assert not allowed(policy, "update", "configmaps", namespace="tidal-system", name="tidal-config")
    assert not allowed(policy, "create", "configmaps", namespace="default")


def test_tidal_evicts_pods_but_cannot_delete_exec_or_read_their_logs(policy: RbacPolicy) -> None:
    assert allowed(policy, "create", "pods", sub="eviction", namespace="default", name="p")
    assert not allowed(policy, "delete", "pods", namespace="default", name="p")
    assert not allowed(policy, "create", "pods", sub="exec", namespace="default", name="p")
    assert not allowed(policy, "get", "pods", sub="log", namespace="default", name="p")


def test_tidal_changes_nodes_but_cannot_create_them_or_write_their_status(policy: RbacPolicy) -> None:
    for verb in ("get", "list", "watch", "patch", "delete"):
        assert allowed(policy, verb, "nodes", name="n" if verb in ("get", "patch", "delete") else "")
    assert not allowed(policy, "create", "nodes")
    assert not allowed(policy, "patch", "nodes", sub="status", name="n")
    assert not allowed(policy, "update", "nodes", name="n")


def test_no_secret_is_readable_anywhere(policy: RbacPolicy) -> None:
    for verb in ("get", "list", "watch"):
        for namespace in ("", "tidal-system", "kube-system"):
            assert not allowed(
                policy, verb, "secrets", namespace=namespace, name="s" if verb == "get" else ""
            )


def test_the_bindings_grant_nothing_to_another_service_account() -> None:
    other = service_account_user("default", "default")
    assert RbacPolicy.from_objects(render(), other).grants == []


def test_tidal_lists_and_watches_dra_claims_and_classes_but_never_changes_them(policy: RbacPolicy) -> None:
    dra = {"group": "resource.k8s.io"}
    for resource in ("deviceclasses", "resourceclaims", "resourceclaimtemplates"):
        assert allowed(policy, "list", resource, **dra)
        assert allowed(policy, "watch", resource, **dra)
        for verb in ("create", "update", "patch", "delete"):
            assert not allowed(policy, verb, resource, name="c", **dra)
    assert allowed(policy, "list", "resourceclaims", namespace="research", **dra)
    assert not allowed(
        policy, "update", "resourceclaims", sub="status", namespace="research", name="c", **dra
    )
    assert not allowed(policy, "list", "resourceslices", **dra)


def test_tidal_reads_provisioning_requests_and_capacity_buffers_and_patches_only_their_status(
    policy: RbacPolicy,
) -> None:
    autoscaling = {"group": "autoscaling.x-k8s.io", "namespace": "research"}
    for resource in ("provisioningrequests", "capacitybuffers"):
        assert allowed(policy, "list", resource, **autoscaling)
        assert allowed(policy, "watch", resource, **autoscaling)
        assert allowed(policy, "patch", resource, sub="status", name="r", **autoscaling)
        for verb in ("create", "update", "patch", "delete"):
            assert not allowed(policy, verb, resource, name="r", **autoscaling)


def test_tidal_watches_pod_templates_and_the_workloads_buffers_size_from_but_never_changes_them(
    policy: RbacPolicy,
) -> None:
    for resource, group in (("podtemplates", ""), ("deployments", "apps"), ("statefulsets", "apps")):
        assert allowed(policy, "list", resource, group=group, namespace="research")
        assert allowed(policy, "watch", resource, group=group, namespace="research")
        for verb in ("create", "update", "patch", "delete"):
            assert not allowed(policy, verb, resource, group=group, namespace="research", name="t")
    assert not allowed(
        policy, "update", "deployments", group="apps", sub="scale", namespace="research", name="t"
    )
