"""The one place boto3 clients are built: endpoint, region, credentials, retries and event hooks.

Tests and local setups change only these inputs (a moto server's endpoint, fixed credentials, hooks that
inject faults); nothing else in the provider touches boto3 construction.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.config

__all__ = ["ClientFactory", "ClientOptions", "Credentials", "pricing_region"]

DEFAULT_MAX_ATTEMPTS = 3
# botocore retries an InsufficientInstanceCapacity returned as HTTP 500 by itself; launches must fail over to
# the next offering at once instead, so CreateFleet is sent once per call. Nothing is lost: a failed launch is
# planned again (in the same reconcile after a capacity error), and the ClientToken makes a repeat of a request
# whose answer never arrived return what it launched.
DEFAULT_LAUNCH_MAX_ATTEMPTS = 1


@dataclass(frozen=True, slots=True)
class Credentials:
    """Static credentials; None in :class:`ClientOptions` means the default chain (IRSA, Pod Identity, ...)."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:  # never print secrets, even in a traceback
        return f"Credentials(access_key_id={self.access_key_id[:4]}…)"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """What a deployment or a test may change about the clients."""

    endpoint_url: str | None = None
    credentials: Credentials | None = None
    max_attempts: int | None = None  # total attempts per call; None: AWS_MAX_ATTEMPTS, else 3
    launch_max_attempts: int = DEFAULT_LAUNCH_MAX_ATTEMPTS
    retry_mode: str | None = None  # None: AWS_RETRY_MODE, else "standard"
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # (event name, handler) pairs registered on every client, e.g. ("before-send.ec2.CreateFleet", hook).
    event_hooks: tuple[tuple[str, Callable[..., Any]], ...] = ()


def pricing_region(region: str) -> str:
    """The Price List API is served from a few regions only; pick the one for the region's partition."""
    if region.startswith("cn-"):
        return "cn-northwest-1"
    return "us-east-1"


class ClientFactory:
    """Builds and caches one client per (service, purpose); clients are thread-safe, sessions are not."""

    def __init__(
        self,
        region: str,
        options: ClientOptions | None = None,
        *,
        endpoint_url: str | None = None,
        session_factory: Callable[[], Any] | None = None,
    ) -> None:
        """``endpoint_url`` comes from ``aws.endpointUrl``; see :meth:`endpoint` for the order of precedence."""
        self.region = region
        self.options = options or ClientOptions()
        self.endpoint_url = (
            self.options.endpoint_url or endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        )
        self._session_factory = session_factory or boto3.session.Session
        self._session: Any = None
        self._clients: dict[tuple[str, bool], Any] = {}
        self._lock = threading.Lock()

    def endpoint(self, service: str) -> str | None:
        """Where ``service`` is reached: the options' endpoint, else ``AWS_ENDPOINT_URL_<SERVICE>`` (the SDKs'
        per-service variable), else ``aws.endpointUrl`` or ``AWS_ENDPOINT_URL``; None means AWS itself."""
        per_service = os.environ.get(f"AWS_ENDPOINT_URL_{service.upper().replace('-', '_')}")
        return self.options.endpoint_url or per_service or self.endpoint_url

    def client(self, service: str, *, launch: bool = False) -> Any:
        """The cached client for ``service``; ``launch=True`` is the few-retries client for launches."""
        key = (service, launch)
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = self._build(service, launch)
            return found

    def _max_attempts(self, launch: bool) -> int:
        configured = self.options.max_attempts
        if configured is None:
            configured = int(os.environ.get("AWS_MAX_ATTEMPTS") or DEFAULT_MAX_ATTEMPTS)
        return min(configured, self.options.launch_max_attempts) if launch else configured

    def _build(self, service: str, launch: bool) -> Any:
        if self._session is None:
            self._session = self._session_factory()
        mode = self.options.retry_mode or os.environ.get("AWS_RETRY_MODE") or "standard"
        config = botocore.config.Config(
            retries={"total_max_attempts": self._max_attempts(launch), "mode": mode},
            connect_timeout=self.options.connect_timeout,
            read_timeout=self.options.read_timeout,
            user_agent_extra="tidal-autoscaler",
        )
        kwargs: dict[str, Any] = {
            "region_name": pricing_region(self.region) if service == "pricing" else self.region,
            "config": config,
        }
        endpoint = self.endpoint(service)
        if endpoint:
            kwargs["endpoint_url"] = endpoint
        creds = self.options.credentials
        if creds is not None:
            kwargs.update(
                aws_access_key_id=creds.access_key_id,
                aws_secret_access_key=creds.secret_access_key,
                aws_session_token=creds.session_token,
            )
        client = self._session.client(service, **kwargs)
        for event, handler in self.options.event_hooks:
            client.meta.events.register(event, handler)
        return client
