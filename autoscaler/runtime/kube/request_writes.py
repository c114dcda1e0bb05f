"""Writes on ProvisioningRequests and CapacityBuffers: their status (through the ``/status`` subresource, a
merge patch) and Events on them. Errors are raised as :class:`KubeApiError` for the caller to log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kubernetes.client
import structlog
from kubernetes.client.exceptions import ApiException

from autoscaler.core.model import CapacityBuffer, ProvisioningRequest
from autoscaler.runtime.kube.actions import ClusterActions
from autoscaler.runtime.kube.client import KubeApiError, KubeClient, api_error_message
from autoscaler.runtime.kube.convert_requests import AUTOSCALING_GROUP

__all__ = ["RequestStatusWrites"]


class RequestStatusWrites:
    """Status and Events of the ``autoscaling.x-k8s.io`` objects tidal answers, through the client's limiter."""

    def __init__(self, client: KubeClient, actions: ClusterActions, *, dry_run: bool = False) -> None:
        self._client = client
        self._actions = actions
        self.dry_run = dry_run
        self._custom = client.api(kubernetes.client.CustomObjectsApi)
        self._log = structlog.get_logger(__name__)

    def _patch_status(
        self, version: str, plural: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        if self.dry_run:
            self._log.info("would write status", dry_run=True, kind=plural, namespace=namespace, name=name)
            return
        try:
            self._client.call(
                self._custom.patch_namespaced_custom_object_status,
                AUTOSCALING_GROUP,
                version,
                namespace,
                plural,
                name,
                {"status": dict(status)},
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            raise KubeApiError(
                f"write status of {plural} {namespace}/{name}", int(exc.status or 0), api_error_message(exc)
            ) from None

    def request_status(self, request: ProvisioningRequest, status: Mapping[str, Any]) -> None:
        """Replace a ProvisioningRequest's status (at the version it was read at)."""
        self._patch_status(request.version, "provisioningrequests", request.namespace, request.name, status)

    def buffer_status(self, buffer: CapacityBuffer, status: Mapping[str, Any]) -> None:
        """Replace a CapacityBuffer's status."""
        self._patch_status("v1beta1", "capacitybuffers", buffer.namespace, buffer.name, status)

    def event(
        self,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        event_type: str = "Warning",
    ) -> None:
        """Record an Event on one of these objects; never raises."""
        version = "v1beta1" if kind == "CapacityBuffer" else "v1"
        involved = {
            "kind": kind,
            "apiVersion": f"{AUTOSCALING_GROUP}/{version}",
            "namespace": namespace,
            "name": name,
        }
        if uid:
            involved["uid"] = uid
        if self.dry_run:
            self._log.info("would record event", dry_run=True, kind=kind, name=name, reason=reason)
            return
        self._actions._event(namespace, name, involved, reason, message, event_type)
