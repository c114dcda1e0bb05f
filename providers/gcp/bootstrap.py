"""How a VM launched by tidal joins as the Node tidal planned: kube-env, kube-labels and GCE labels.

A GKE node pool's instance template carries the node's bootstrap in metadata: ``kube-env`` (a YAML map read
by GKE's node start-up scripts) holds ``KUBELET_ARGS`` with ``--node-labels`` and
``--register-with-taints``, and, depending on the GKE version, ``NODE_LABELS``, ``NODE_TAINTS`` and the
``node_labels=…;node_taints=…`` parts of ``AUTOSCALER_ENV_VARS``; the ``kube-labels`` metadata item repeats
the labels. tidal rewrites every one of those that the template has, so whichever the node's scripts read,
the kubelet registers with tidal's labels and taints. Everything else in kube-env is left byte for byte.

GCE labels (on the VM, not the Node) must be lowercase ``[a-z0-9_-]``, at most 63 characters, keys starting
with a letter, at most 64 per VM: :func:`gce_label` encodes any text that way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from autoscaler.core.model import Taint

__all__ = [
    "KUBE_ENV",
    "KUBE_LABELS",
    "LABEL_CLUSTER",
    "LABEL_MANAGED",
    "LABEL_TOKEN",
    "REPLACED_NODE_LABELS",
    "format_labels",
    "format_taints",
    "gce_label",
    "kubelet_labels",
    "parse_labels",
    "rewrite_kube_env",
    "template_node_labels",
]

KUBE_ENV = "kube-env"
KUBE_LABELS = "kube-labels"
LABEL_CLUSTER = "tidal-cluster"
LABEL_MANAGED = "tidal-managed"
LABEL_TOKEN = "tidal-launch-token"
MAX_GCE_LABELS = 64
GCE_LABEL_LENGTH = 63

# Labels of the template's node pool that describe *its* machines; tidal sets them for the offering.
REPLACED_NODE_LABELS = (
    "cloud.google.com/gke-spot",
    "cloud.google.com/gke-preemptible",
    "cloud.google.com/gke-provisioning",
    "cloud.google.com/gke-accelerator",
    "cloud.google.com/gke-accelerator-count",
    "cloud.google.com/gke-gpu",
    "cloud.google.com/gke-gpu-driver-version",
    "cloud.google.com/gke-gpu-partition-size",
    "cloud.google.com/gke-gpu-sharing-strategy",
    "cloud.google.com/gke-max-shared-clients-per-gpu",
    "cloud.google.com/machine-family",
)
# The kubelet may not set labels in these domains (NodeRestriction); the kubelet and the cloud controller
# manager set the well-known ones (instance type, zone, arch) themselves.
_RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io")
_LINE = re.compile(r"^(?P<key>[A-Z0-9_]+):(?P<space>[ \t]*)(?P<value>.*)$")


def gce_label(text: str, *, key: bool = False) -> str:
    """``text`` as a GCE label key or value: lowercase ``[a-z0-9_-]``, ≤63 characters, keys start with a
    letter (``tidal.dev/Team`` → ``tidal_dev_team``)."""
    encoded = re.sub(r"[^a-z0-9_-]", "_", text.lower())[:GCE_LABEL_LENGTH]
    if key and not re.match(r"[a-z]", encoded):
        encoded = ("k" + encoded)[:GCE_LABEL_LENGTH]
    return encoded


def parse_labels(text: str) -> dict[str, str]:
    """``a=1,b=2`` (kube-labels, --node-labels) → ``{"a": "1", "b": "2"}``; malformed parts are skipped."""
    out = {}
    for part in text.split(","):
        k, sep, v = part.strip().partition("=")
        if sep and k.strip():
            out[k.strip()] = v.strip()
    return out


def format_labels(labels: Mapping[str, str]) -> str:
    """Labels in the ``k=v,k2=v2`` form the kubelet reads, sorted so the output is stable."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def format_taints(taints: Sequence[Taint]) -> str:
    """Taints in the ``key=value:Effect,key:Effect`` form of ``--register-with-taints``."""
    return ",".join(str(t) for t in taints)


def kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a kubelet may register with: none in the kubernetes.io and k8s.io domains."""
    out = {}
    for k, v in labels.items():
        domain = k.rpartition("/")[0]
        if any(domain == d or domain.endswith("." + d) for d in _RESTRICTED_DOMAINS):
            continue
        out[k] = v
    return out


def _unquote(value: str) -> tuple[str, str]:
    stripped = value.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\"":
        return stripped[1:-1], stripped[0]
    return stripped, ""


def _flag(args: str, name: str, value: str | None) -> str:
    """Set ``--name=value`` in a kubelet argument string (drop it when ``value`` is None or empty)."""
    tokens = [t for t in args.split() if not t.startswith(f"--{name}=")]
    if value:
        tokens.append(f"--{name}={value}")
    return " ".join(tokens)


def _env_vars(text: str, labels: str, taints: str) -> str:
    parts = []
    for part in text.split(";"):
        name = part.partition("=")[0]
        if name == "node_labels":
            part = f"node_labels={labels}"
        elif name == "node_taints":
            part = f"node_taints={taints}"
        parts.append(part)
    return ";".join(parts)


def template_node_labels(kube_env: str, kube_labels: str | None) -> dict[str, str]:
    """The node labels a template gives its nodes: ``kube-labels``, else ``NODE_LABELS``, else the
    kubelet's ``--node-labels``."""
    if kube_labels:
        return parse_labels(kube_labels)
    entries = {
        m.group("key"): _unquote(m.group("value"))[0] for m in map(_LINE.match, kube_env.splitlines()) if m
    }
    if entries.get("NODE_LABELS"):
        return parse_labels(entries["NODE_LABELS"])
    for token in entries.get("KUBELET_ARGS", "").split():
        if token.startswith("--node-labels="):
            return parse_labels(token.partition("=")[2])
    return {}


def rewrite_kube_env(kube_env: str, labels: Mapping[str, str], taints: Sequence[Taint], zone: str) -> str:
    """kube-env with every label and taint carrier set to ``labels``/``taints`` (and ``ZONE`` to ``zone``)."""
    label_text, taint_text = format_labels(labels), format_taints(taints)
    out, seen = [], set()
    for line in kube_env.split("\n"):
        m = _LINE.match(line)
        if m is None:
            out.append(line)
            continue
        key, (value, quote) = m.group("key"), _unquote(m.group("value"))
        seen.add(key)
        if key == "KUBELET_ARGS":
            value = _flag(_flag(value, "node-labels", label_text), "register-with-taints", taint_text)
        elif key == "NODE_LABELS":
            value = label_text
        elif key == "NODE_TAINTS":
            value = taint_text
        elif key == "AUTOSCALER_ENV_VARS":
            value = _env_vars(value, label_text, taint_text)
        elif key == "ZONE":
            value = zone
        else:
            out.append(line)
            continue
        out.append(f"{key}:{m.group('space') or ' '}{quote}{value}{quote}")
    if not seen & {"KUBELET_ARGS", "NODE_LABELS"}:
        out.append(f"NODE_LABELS: {label_text}")
    if taint_text and not seen & {"KUBELET_ARGS", "NODE_TAINTS"}:
        out.append(f"NODE_TAINTS: {taint_text}")
    return "\n".join(out)
