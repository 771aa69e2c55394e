"""The docs a user needs ship with the project: every link in README.md and docs/ resolves, and no
code, message or doc points to a file the project does not ship."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# names of design notes that live outside the project
UNSHIPPED = re.compile(r"DESIGN(\.md| ?§)|TEAM\.md|\.\./shared|\bshared/")


def _shipped(*suffixes: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return [ROOT / f for f in out if f.endswith(suffixes) and (ROOT / f).is_file()]


def test_no_file_points_to_a_document_the_project_does_not_ship() -> None:
    this = Path(__file__).resolve()
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in _shipped(".py", ".md", ".yaml", ".yml", ".toml") if p.resolve() != this
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if UNSHIPPED.search(line)]
    assert found == []


def test_every_link_in_the_readme_and_docs_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in ("own-repo", "project-yaml", "tasks-yaml", "providers", "scenarios", "contracts"):
        assert ROOT / "docs" / f"{page}.md" in pages, page
        assert f"docs/{page}.md" in (ROOT / "README.md").read_text(), page
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
        for anchor_page, anchor in re.findall(r"\]\(([^)#\s]*)#([^)]+)\)", text):
            doc = (page.parent / anchor_page) if anchor_page else page
            heads = [re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.+)$", doc.read_text(encoding="utf-8"), re.M)]
            if anchor not in heads:
                broken.append(f"{page.relative_to(ROOT)} -> {anchor_page}#{anchor}")
    assert broken == []
