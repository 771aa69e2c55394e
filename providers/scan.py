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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pilothouse.providers import paths, workerfs
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


def iter_files(roots: Iterable[Path],
               on_skip: Callable[[workerfs.Skipped], None] | None = None) -> Iterator[tuple[Path, str]]:
    """Every regular file under the roots, walked through the door (providers/workerfs.py): run
    folders and worktrees are the workers' writing, so no link is followed and a FIFO, device or
    socket is passed over with a line to `on_skip` (opening a FIFO for reading would hang).
    Yields (root, path relative to it): the file is read from that root again by fd."""
    seen: set[str] = set()
    for root in roots:
        if root.is_symlink():
            continue
        if root.is_file():
            candidates: Iterable[tuple[Path, str]] = [(root.parent, root.name)]
        else:
            def skip_dir(rel: str, root: Path = root) -> bool:
                return _skip(root / rel)

            def skipped(s: workerfs.Skipped, root: Path = root) -> None:
                if on_skip is not None:
                    on_skip(workerfs.Skipped(str(root / s.rel), s.why))

            candidates = ((root, f.rel) for f in workerfs.walk(root, skip_names=CREDENTIAL_NAMES, skip_dirs=skip_dir,
                                                             on_skip=skipped, limit=MAX_FILE_BYTES))
        for base, rel in candidates:
            key = os.path.normpath(base / rel)
            if key in seen or _skip(base / rel):
                continue
            seen.add(key)
            yield base, rel


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


def scan_file(root: Path, rel: str, redactor: Redactor) -> list[Hit]:
    path = root / rel
    try:
        entry = workerfs.read(root, rel, MAX_FILE_BYTES)
    except (OSError, ValueError):
        return []
    if entry.kind != "file":
        return []  # a link or FIFO put there since the walk listed it
    data = entry.data
    # binary files (state.db, screenshots) are searched as latin-1 so that every byte maps to one
    # character and ASCII keys are found wherever they sit; text files as UTF-8
    text = data.decode("latin-1") if b"\0" in data[:8192] else data.decode("utf-8", errors="replace")
    return [Hit(str(path), line, kind) for line, kind in scan_text(text, redactor)]


def scan(roots: Iterable[Path], secrets: Iterable[str] | None = None, *,
         redactor: Redactor | None = None,
         on_skip: Callable[[workerfs.Skipped], None] | None = None) -> tuple[list[Hit], int]:
    """(hits, number of files scanned); what was not read (links, FIFOs, devices) goes to on_skip."""
    if redactor is None:
        redactor = Redactor(secrets) if secrets is not None else redactor_for_configured()
    hits: list[Hit] = []
    count = 0
    for root, rel in iter_files(roots, on_skip):
        count += 1
        # a file can be called after a key (a worker's `kc_name_<KEY>.txt`): its name is looked at
        # too, and every hit's path is masked, so the report never prints the key it found
        hits += [Hit(masked(h.path, redactor), h.line, h.kind) for h in scan_file(root, rel, redactor)]
        hits += scan_name(Path(rel).name, redactor, str(root / rel), "the file's name")
    return hits, count


def masked(name: str, redactor: Redactor) -> str:
    """`name` with every configured key and every credential shape in it replaced: a hit says where
    a credential is, and a name can be where (a file called after a key)."""
    out = redactor.redact(name)
    for _kind, pattern in CREDENTIAL_PATTERNS:
        out = pattern.sub(REDACTED, out)
    return out


def scan_name(name: str, redactor: Redactor, where: str, what: str) -> list[Hit]:
    """Credentials in one name or message a worker chose (a file's name, a commit message, a branch
    name): Hits at `where` (masked), kind "... in `what`". A line of it marked ALLOW_MARK lets a fake
    token through, never a configured key."""
    lines = name.split("\n")
    return [Hit(masked(where, redactor), line if len(lines) > 1 else 0, f"{kind} in {what}")
            for line, kind in scan_text(name, redactor)
            if kind == KEY_KIND or ALLOW_MARK not in lines[line - 1]]


def _header_path(rest: str) -> str:
    """The file of a `diff --git a/P b/P` header (no renames: both sides name the same file); git
    C-quotes a name with a control character, a quote or a backslash in it."""
    if rest.startswith('"'):
        import codecs

        quoted = rest.rsplit(' "b/', 1)[-1].removesuffix('"')
        try:
            raw = codecs.escape_decode(quoted.encode("utf-8"))[0]
        except ValueError:
            return quoted
        return bytes(raw).decode("utf-8", "replace")
    n = (len(rest) - 5) // 2
    return rest[2:2 + n] if rest[2 + n:] == f" b/{rest[2:2 + n]}" else rest


def link_hits(roots: Iterable[Path], redactor: Redactor) -> list[Hit]:
    """Credentials in the targets of the links under `roots` (a worker's `ln -s <KEY> x`): read with
    readlink, never followed. A walk of its own, so the file walk's rules stay where they are."""
    hits: list[Hit] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            base = Path(dirpath)
            dirnames[:] = [d for d in dirnames if not _skip(base / d)]
            for name in (*dirnames, *filenames):
                p = base / name
                if p.is_symlink():
                    try:
                        target = os.readlink(p)
                    except OSError:
                        continue
                    hits += scan_name(target, redactor, str(p), "the link's target")
    return hits


def scan_diff(diff: str, redactor: Redactor) -> list[Hit]:
    """Credentials a unified diff (`git diff -U0 --text`) adds, as (file, line in the new file,
    kind): on its added lines (a link's target is its one line) and in the name of every file it
    adds or keeps, an empty one included (at line 0; the name in every hit is masked). Removed and
    context lines are not looked at: taking a key out is no leak.

    A line that carries ALLOW_MARK is let through when what it holds only looks like a credential
    (a test fixture's fake token); a configured key never is."""
    hits: list[Hit] = []
    path, line, header, deleted = "", 0, False, False

    def name_hits() -> None:
        if path and not deleted:
            hits.extend(scan_name(path, redactor, path, "the file's name"))

    for raw in diff.split("\n"):
        if raw.startswith("diff --git "):
            name_hits()  # the file before this one: its header said by now whether it was deleted
            path, header, deleted = _header_path(raw[len("diff --git "):]), True, False
            continue
        if header:
            if raw.startswith("deleted file mode"):
                deleted = True
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
                    hits.append(Hit(masked(path, redactor), line, kind))
            line += 1
    name_hits()
    return hits


def message_hits(repo: Path | str, spec: list[str], redactor: Redactor) -> list[Hit]:
    """Credentials in the messages of the commits `git log SPEC` lists, at `commit <sha>: message`."""
    import subprocess

    proc = subprocess.run(["git", "log", "--format=%H%x00%B%x00", *spec], cwd=repo, capture_output=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return []
    fields = proc.stdout.decode("utf-8", "replace").split("\0")
    hits: list[Hit] = []
    for sha, message in zip(fields[0::2], fields[1::2], strict=False):
        hits += scan_name(message, redactor, f"commit {sha.strip()[:10]}", "its message")
    return hits


def ref_hits(refs: Iterable[str], redactor: Redactor) -> list[Hit]:
    """Credentials in branch names (a worker that ran git with confinement off chose them)."""
    return [h for ref in refs
            for h in scan_name(ref.removeprefix("refs/heads/"), redactor, ref.removeprefix("refs/heads/"),
                               "the branch's name")]


# the worker's repo config must not choose what we read (see core/git/leaks.py)
_LOG = ("-c", "core.quotePath=false", "log", "--no-color", "--no-ext-diff", "--no-textconv", "--text",
        "--no-renames", "-U0", "-p", "--src-prefix=a/", "--dst-prefix=b/", "--format=%x00commit %H %S")


def scan_commits(repo: Path, refs: list[str], others: list[str], redactor: Redactor) -> tuple[list[Hit], int]:
    """(hits, commits scanned) in the commits reachable from `refs` and from none of `others`: what
    pilothouse's branches added to the repository, their files' contents and names, their messages,
    and the branches' names. A hit's path is `<branch>@<commit>:<file>`."""
    import subprocess

    if not refs:
        return [], 0
    spec = [*refs, *(["--not", *others] if others else [])]
    proc = subprocess.run(["git", *_LOG, *spec], cwd=repo, capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return [], 0
    hits: list[Hit] = []
    chunks = [c for c in proc.stdout.decode("utf-8", "replace").split("\0commit ") if c.strip()]
    for chunk in chunks:
        head, _, diff = chunk.partition("\n")
        sha, _, ref = head.partition(" ")
        where = f"{masked(ref.removeprefix('refs/heads/'), redactor) or '?'}@{sha[:10]}"
        hits += [Hit(f"{where}:{h.path}", h.line, h.kind) for h in scan_diff(diff, redactor)]
    hits += message_hits(repo, spec, redactor) + ref_hits(refs, redactor)
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
