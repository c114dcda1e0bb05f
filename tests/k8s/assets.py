"""Where the control-plane binaries come from: a folder the user names, or the shared xz archives unpacked once.

``TIDAL_K8S_ASSETS`` names a folder holding ``etcd``, ``kube-apiserver``, ``kube-scheduler`` and
``kube-controller-manager`` (any Kubernetes version). Without it, the archives beside the repository
(``../shared/k8s/v1.36.2/*.xz``) are unpacked into a cache outside the tree, checked against their
``SHA256SUMS``; a later run reuses the cache.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
ROOT = Path(__file__).resolve().parents[2]
SHARED_RELEASE = ROOT.parent / "shared" / "k8s" / "v1.36.2"
ENV_ASSETS = "TIDAL_K8S_ASSETS"
ENV_CACHE = "TIDAL_K8S_CACHE"
HOW_TO = (
    f"the real control plane needs {ENV_ASSETS}=<folder with {', '.join(COMPONENTS)}> "
    f"or the archives in {SHARED_RELEASE}"
)


class AssetsMissing(RuntimeError):
    """No binaries can be had: the message says what to set."""


def cache_root() -> Path:
    """Outside the repository, so unpacked binaries are never committed."""
    if env := os.environ.get(ENV_CACHE):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidal" / "k8s"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksums(release: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for line in (release / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name.lstrip("*")] = digest
    return sums


def _unpack(archive: Path, target: Path, digest: str) -> None:
    """Decompress to a temporary name, check, then rename: a crashed unpack never leaves a bad binary."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out, lzma.open(archive) as src:
            shutil.copyfileobj(src, out, 1 << 22)
        if _sha256(Path(tmp)) != digest:
            raise AssetsMissing(f"{archive}: unpacked binary does not match SHA256SUMS")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def binaries() -> dict[str, Path]:
    """Each component's executable, unpacking the shared release on first use."""
    if env := os.environ.get(ENV_ASSETS):
        folder = Path(env)
        found = {c: folder / c for c in COMPONENTS}
        missing = [str(p) for p in found.values() if not os.access(p, os.X_OK)]
        if missing:
            raise AssetsMissing(f"{ENV_ASSETS}={env}: not executable or absent: {', '.join(missing)}")
        return found
    if not (SHARED_RELEASE / "SHA256SUMS").is_file():
        raise AssetsMissing(HOW_TO)
    sums = _checksums(SHARED_RELEASE)
    folder = cache_root() / SHARED_RELEASE.name
    folder.mkdir(parents=True, exist_ok=True)
    found = {}
    for component in COMPONENTS:
        archive = SHARED_RELEASE / f"{component}.xz"
        target = folder / component
        stamp = folder / f".{component}.sha256"
        if not archive.is_file():
            raise AssetsMissing(f"{archive} is missing; {HOW_TO}")
        if not (target.is_file() and stamp.is_file() and stamp.read_text() == sums[component]):
            _unpack(archive, target, sums[component])
            stamp.write_text(sums[component])
        found[component] = target
    return found
