"""RBAC for the fake API server: enforce rendered Roles/ClusterRoles on one client, and audit what it used.

The fake's ``authorizer`` hook is called as ``(verb, group, resource, subresource, namespace)``: it cannot tell
which client made a request (the test harness's own clients must stay unrestricted) and it never sees the
object's name (needed for ``resourceNames``). :class:`RbacApiServer` adds exactly those two facts without
touching the fake: its request handler reads the bearer token and the route's name into a thread-local just
before the fake calls the authorizer, on the same handler thread.

    policy = RbacPolicy.from_objects(rendered_manifests, SERVICE_ACCOUNT_USER)
    enforcer = RbacEnforcer(policy, tokens={"daemon-token": SERVICE_ACCOUNT_USER})
    with RbacApiServer(enforcer) as api:
        ...  # a client with token "daemon-token" gets 403 for anything the policy does not grant
    enforcer.denied, policy.unused(enforcer.used)

Rule matching follows Kubernetes' RBAC authorizer: verbs, API groups and resources match exactly or by
``*``, a subresource is ``resource/subresource`` (or ``*/subresource``), ``resourceNames`` limits a rule to
named objects (so it never matches create or list), a ClusterRoleBinding grants everywhere and a RoleBinding
only in its own namespace.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.kube_http import KubeRequestHandler

__all__ = [
    "CLUSTER_WIDE",
    "Grant",
    "RbacApiServer",
    "RbacEnforcer",
    "RbacPolicy",
    "RbacRequest",
    "service_account_user",
]

CLUSTER_WIDE = "*"
"""The scope of a grant that came through a ClusterRoleBinding."""


def service_account_user(namespace: str, name: str) -> str:
    """The user name Kubernetes authenticates a ServiceAccount token as."""
    return f"system:serviceaccount:{namespace}:{name}"


class RbacRequest(NamedTuple):
    """One resource request as the RBAC authorizer sees it ("" = none: core group, cluster scope...)."""

    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    def describe(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f"namespace {self.namespace}" if self.namespace else "cluster scope"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{resource}{named} ({where})"


class Grant(NamedTuple):
    """One verb on one resource of one group, from one rule of one role, in one binding's scope."""

    role: str  # "ClusterRole/tidal", "Role/tidal-system/tidal"
    scope: str  # CLUSTER_WIDE or the RoleBinding's namespace
    group: str
    resource: str  # "pods", "pods/eviction", "*"
    verb: str
    resource_names: tuple[str, ...]

    def allows(self, request: RbacRequest) -> bool:
        if self.scope != CLUSTER_WIDE and request.namespace != self.scope:
            return False
        if self.verb not in ("*", request.verb) or self.group not in ("*", request.group):
            return False
        wanted = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        sub_wildcard = request.subresource and self.resource == f"*/{request.subresource}"
        if self.resource not in ("*", wanted) and not sub_wildcard:
            return False
        return not self.resource_names or request.name in self.resource_names

    def describe(self) -> str:
        names = f" named {','.join(self.resource_names)}" if self.resource_names else ""
        where = "cluster-wide" if self.scope == CLUSTER_WIDE else f"in {self.scope}"
        return f"{self.role}: {self.verb} {self.group or 'core'}/{self.resource}{names} {where}"


def _subject_user(subject: Mapping[str, Any], binding_namespace: str) -> str | None:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        return service_account_user(str(subject.get("namespace") or binding_namespace), str(subject["name"]))
    if kind == "User":
        return str(subject["name"])
    return None  # groups are not modelled: nothing here binds to one


@dataclass
class RbacPolicy:
    """The grants that reach one user through the bindings among a set of rendered objects."""

    user: str
    grants: list[Grant] = field(default_factory=list)

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]], user: str) -> RbacPolicy:
        """Collect Roles, ClusterRoles and their bindings; keep the grants of bindings whose subjects name
        ``user``. A binding whose role is missing is an error: on a real cluster it grants nothing."""
        objects = list(objects)
        roles: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for obj in objects:
            meta = obj.get("metadata") or {}
            if obj.get("kind") in ("Role", "ClusterRole"):
                namespace = str(meta.get("namespace") or "") if obj["kind"] == "Role" else ""
                roles[(obj["kind"], namespace, str(meta["name"]))] = obj
        policy = cls(user)
        for obj in objects:
            if obj.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            meta = obj.get("metadata") or {}
            binding_ns = str(meta.get("namespace") or "") if obj["kind"] == "RoleBinding" else ""
            if user not in {_subject_user(s, binding_ns) for s in obj.get("subjects") or ()}:
                continue
            ref = obj["roleRef"]
            role_ns = binding_ns if ref["kind"] == "Role" else ""
            role = roles.get((ref["kind"], role_ns, ref["name"]))
            if role is None:
                raise ValueError(
                    f"{obj['kind']} {meta.get('name')} refers to missing {ref['kind']} {ref['name']}"
                )
            scope = CLUSTER_WIDE if obj["kind"] == "ClusterRoleBinding" else binding_ns
            label = f"{ref['kind']}/{role_ns + '/' if role_ns else ''}{ref['name']}"
            policy.grants.extend(_grants(label, scope, role.get("rules") or ()))
        return policy

    def matching(self, request: RbacRequest) -> list[Grant]:
        """Every grant that allows the request (empty: 403)."""
        if request.user != self.user:
            return []
        return [g for g in self.grants if g.allows(request)]

    def unused(self, used: Iterable[Grant]) -> list[Grant]:
        """Grants no recorded request needed, in policy order."""
        seen = set(used)
        return [g for g in self.grants if g not in seen]


def _grants(role: str, scope: str, rules: Iterable[Mapping[str, Any]]) -> Iterable[Grant]:
    for rule in rules:
        if rule.get("nonResourceURLs"):
            continue
        names = tuple(rule.get("resourceNames") or ())
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    yield Grant(role, scope, group, resource, verb, names)


class _Context(threading.local):
    user: str = ""
    name: str = ""


@dataclass
class RbacEnforcer:
    """Authorizes requests whose bearer token maps to a user; requests without a token pass (test setup)."""

    policy: RbacPolicy
    tokens: Mapping[str, str]
    used: set[Grant] = field(default_factory=set)
    allowed: list[RbacRequest] = field(default_factory=list)
    denied: list[RbacRequest] = field(default_factory=list)
    _context: _Context = field(default_factory=_Context, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def enter(self, authorization: str | None, name: str) -> None:
        """Called by the request handler before the fake authorizes: who is asking, for which object."""
        token = (authorization or "").removeprefix("Bearer ").strip()
        self._context.user = self.tokens.get(token, "system:anonymous") if token else ""
        self._context.name = name

    def authorizer(self, verb: str, group: str, resource: str, subresource: str, namespace: str) -> bool:
        """The fake's ``Authorizer`` signature; the user and object name come from :meth:`enter`."""
        user = self._context.user
        if not user:
            return True
        request = RbacRequest(user, verb, group, resource, subresource, namespace, self._context.name)
        grants = self.policy.matching(request)
        with self._lock:
            if grants:
                self.used.update(grants)
                self.allowed.append(request)
            else:
                self.denied.append(request)
        return bool(grants)


class RbacRequestHandler(KubeRequestHandler):
    """The fake's handler, telling the enforcer who asks before the fake consults its authorizer."""

    enforcer: RbacEnforcer  # bound by RbacApiServer.start()

    def _authorize(self, verb: str, route: Any) -> None:
        self.enforcer.enter(self.headers.get("Authorization"), route.name or "")
        super()._authorize(verb, route)


class RbacApiServer(FakeApiServer):
    """A :class:`FakeApiServer` whose authorizer enforces ``enforcer``'s policy on token-bearing clients."""

    def __init__(self, enforcer: RbacEnforcer, **kwargs: Any) -> None:
        kwargs.setdefault("user", enforcer.policy.user)
        super().__init__(**kwargs)
        self.enforcer = enforcer
        self.authorizer = enforcer.authorizer

    def start(self) -> RbacApiServer:
        started = self._server is None
        super().start()
        if started and self._server is not None:
            # Swapped before start() returns, so no connection is ever served by the plain handler.
            self._server.RequestHandlerClass = type(
                "BoundRbacHandler", (RbacRequestHandler,), {"fake": self, "enforcer": self.enforcer}
            )
        return self
