"""`pilothouse scan-secrets`: look for leaked credentials where pilothouse writes.

Scans a repository's .ai (events, state.db, supervisor log, job records, attachments), the commits
pilothouse's branches added (task branches, the integration branch), and the user's run logs and
run folders for every configured key — raw, JSON-escaped, URL-encoded or base64, the same forms
redaction replaces — and for the shapes of common credentials. Hits are reported as
file:line and kind, never the value. The credential files pilothouse itself keeps in a sandbox
(and the file key store) are where keys belong and are not scanned; symlinks are not followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pilothouse.providers import paths
from pilothouse.providers.guard import _PATTERNS as CREDENTIAL_PATTERNS
from pilothouse.providers.redact import REDACTED, Redactor, redactor_for_configured

CREDENTIAL_NAMES = frozenset({"credential"})  # providers/sandbox.py CREDENTIAL
KEY_KIND = "configured provider key"
ALLOW_MARK = "pilothouse:allow-secret"
MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Hit:
    path: str
    line: int  # 1-based; for binary files, the line count of the bytes before the hit
    kind: str

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "kind": self.kind}


def repo_of(target: Path | None) -> Path | None:
    """The repository scan-secrets looks at: TARGET when it has an .ai folder, else the one around
    the current directory (None for a plain file or folder)."""
    if target is not None:
        return target if (target / ".ai").is_dir() else None
    cwd = Path.cwd()
    return next((d for d in (cwd, *cwd.parents) if (d / ".ai" / "runtime").is_dir()), None)


def default_roots(target: Path | None) -> list[Path]:
    """The repo's whole .ai (runtime, jobs, attachments, the task graph; or TARGET itself when it
    is no repository), the logs dir, the sandboxes (every run folder)."""
    repo = repo_of(target)
    roots: list[Path] = [repo / ".ai"] if repo is not None else ([target] if target is not None else [])
    roots += [paths.logs_dir(), paths.providers_dir()]
    return [r for r in roots if r.exists()]


def _skip(path: Path) -> bool:
    if path.name in CREDENTIAL_NAMES:
        return True
    secrets = paths.secrets_dir()
    return path == secrets or path.is_relative_to(secrets)


def iter_files(roots: Iterable[Path]) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()
    for root in roots:
        if root.is_file() and not root.is_symlink():
            candidates: Iterable[Path] = [root]
        else:
            candidates = _walk(root)
        for path in candidates:
            try:
                st = path.lstat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen or _skip(path):
                continue
            seen.add((st.st_dev, st.st_ino))
            yield path


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not _skip(base / d)]
        for name in filenames:
            p = base / name
            if not p.is_symlink():
                yield p


def scan_text(text: str, redactor: Redactor) -> list[tuple[int, str]]:
    """(line, kind) for every credential in `text`."""
    hits: list[tuple[int, str]] = []
    spans: list[tuple[int, int]] = []
    for m in redactor.finditer(text):
        spans.append(m.span())
        hits.append((text.count("\n", 0, m.start()) + 1, KEY_KIND))
    for kind, pattern in CREDENTIAL_PATTERNS:
        for m in pattern.finditer(text):
            if REDACTED in m.group(0):
                continue  # `API_KEY=[REDACTED]` is redaction having worked
            if any(a < m.end() and m.start() < b for a, b in spans):
                continue  # already reported, more precisely, as a configured key
            hits.append((text.count("\n", 0, m.start()) + 1, kind))
    return sorted(set(hits))


def scan_file(path: Path, redactor: Redactor) -> list[Hit]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    # binary files (state.db, screenshots) are searched as latin-1 so that every byte maps to one
    # character and ASCII keys are found wherever they sit; text files as UTF-8
    text = data.decode("latin-1") if b"\0" in data[:8192] else data.decode("utf-8", errors="replace")
    return [Hit(str(path), line, kind) for line, kind in scan_text(text, redactor)]


def scan(roots: Iterable[Path], secrets: Iterable[str] | None = None, *,
         redactor: Redactor | None = None) -> tuple[list[Hit], int]:
    """(hits, number of files scanned)."""
    if redactor is None:
        redactor = Redactor(secrets) if secrets is not None else redactor_for_configured()
    hits: list[Hit] = []
    count = 0
    for path in iter_files(roots):
        count += 1
        hits += scan_file(path, redactor)
    return hits, count


def scan_diff(diff: str, redactor: Redactor) -> list[Hit]:
    """Credentials on the added lines of a unified diff (`git diff -U0 --text`), as (file, line in
    the new file, kind). A credential in a file's name counts too, at line 0; the name in the hit
    is redacted. Removed and context lines are not looked at: taking a key out is no leak.

    A line that carries ALLOW_MARK is let through when what it holds only looks like a credential
    (a test fixture's fake token); a configured key never is."""
    hits: list[Hit] = []
    path, line, header = "", 0, False
    for raw in diff.split("\n"):
        if raw.startswith("diff --git "):
            header = True
            continue
        if header:
            if raw.startswith("+++ "):
                name = raw[4:].strip().strip('"')
                path = name[2:] if name.startswith("b/") else name
                if path != "/dev/null" and redactor and any(True for _ in redactor.finditer(path)):
                    hits.append(Hit(redactor.redact(path), 0, "configured provider key in the file's name"))
            elif raw.startswith("@@"):
                header = False
            else:
                continue
        if raw.startswith("@@"):
            # @@ -a,b +c,d @@: the added lines that follow are lines c, c+1, … of the new file
            new = raw.split("+", 1)[1].split(" ", 1)[0]
            line = int(new.split(",")[0] or 0)
            continue
        if raw.startswith("+"):
            allowed = ALLOW_MARK in raw
            for _n, kind in scan_text(raw[1:], redactor):
                if not allowed or kind == KEY_KIND:
                    hits.append(Hit(redactor.redact(path), line, kind))
            line += 1
    return hits


# the worker's repo config must not choose what we read (see core/git/leaks.py)
_LOG = ("-c", "core.quotePath=false", "log", "--no-color", "--no-ext-diff", "--no-textconv", "--text",
        "--no-renames", "-U0", "-p", "--src-prefix=a/", "--dst-prefix=b/", "--format=%x00commit %H %S")


def scan_commits(repo: Path, refs: list[str], others: list[str], redactor: Redactor) -> tuple[list[Hit], int]:
    """(hits, commits scanned) in the commits reachable from `refs` and from none of `others`: what
    pilothouse's branches added to the repository. A hit's path is `<branch>@<commit>:<file>`."""
    import subprocess

    if not refs:
        return [], 0
    argv = ["git", *_LOG, *refs, *(["--not", *others] if others else [])]
    proc = subprocess.run(argv, cwd=repo, capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return [], 0
    hits: list[Hit] = []
    chunks = [c for c in proc.stdout.decode("utf-8", "replace").split("\0commit ") if c.strip()]
    for chunk in chunks:
        head, _, diff = chunk.partition("\n")
        sha, _, ref = head.partition(" ")
        where = f"{ref.removeprefix('refs/heads/') or '?'}@{sha[:10]}"
        hits += [Hit(f"{where}:{h.path}", h.line, h.kind) for h in scan_diff(diff, redactor)]
    return hits, len(chunks)


def branch_split(repo: Path, integration: str) -> tuple[list[str], list[str]]:
    """(pilothouse's branches: the task branches ph/*, `integration` and the jobs' lines under it,
    every other local branch)."""
    import subprocess

    proc = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/heads/"], cwd=repo,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    ours: list[str] = []
    others: list[str] = []
    for ref in proc.stdout.split() if proc.returncode == 0 else []:
        name = ref.removeprefix("refs/heads/")
        (ours if name.startswith(("ph/", integration + "/")) or name == integration else others).append(ref)
    return ours, others
