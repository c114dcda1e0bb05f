"""The control-plane fixture itself: the four components serve, and their faults can be staged."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client
import kubernetes.config
import pytest
from kubernetes.client.exceptions import ApiException

from tests.k8s.control_plane import ControlPlane


def test_the_api_server_serves_the_built_in_namespaces(control_plane: ControlPlane) -> None:
    with control_plane.admin_client() as api:
        names = {ns.metadata.name for ns in kubernetes.client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names


def test_a_service_account_token_is_refused_what_its_rbac_does_not_grant(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    with control_plane.admin_client() as api:
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "fixture-rbac"}})
        core.create_namespaced_service_account("fixture-rbac", {"metadata": {"name": "nobody"}})
    kubeconfig = control_plane.service_account_kubeconfig("fixture-rbac", "nobody", tmp_path / "kc")
    with (
        kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api,
        pytest.raises(ApiException) as refused,
    ):
        kubernetes.client.CoreV1Api(api).list_node()
    assert refused.value.status == 403
    assert "system:serviceaccount:fixture-rbac:nobody" in refused.value.body
