"""The README and the user guides link only to files that exist, and the README links every guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDES = [
    "install.md",
    "configuration.md",
    "kai.md",
    "gpu-sharing.md",
    "migrating.md",
    "troubleshooting.md",
    "scheduling.md",
]
PAGES = [REPO / "README.md", *(REPO / "docs" / g for g in GUIDES)]
# The per-cloud guides are written with the cloud providers; a link to one is checked once it exists.
CLOUD_GUIDES = {REPO / "docs" / f"{cloud}.md" for cloud in ("aws", "gcp", "azure")}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def local_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_local_link_resolves(page: Path) -> None:
    broken = []
    for target in local_links(page):
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists() and path not in CLOUD_GUIDES:
            broken.append(target)
    assert broken == []


def test_the_readme_links_every_guide() -> None:
    linked = {Path(t).name for t in local_links(REPO / "README.md") if t.startswith("docs/")}
    assert sorted(set(GUIDES) - linked) == []
