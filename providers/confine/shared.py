"""`sandbox.share`: the main checkout's dependency folders (`.venv`, `node_modules`, build caches),
read-only in every builder's and gate's sandbox, with the code under test always the worktree's.

A venv or a node_modules is full of absolute paths into the checkout it was made in: a console
script's `#!/repo/.venv/bin/python`, an editable install's `.pth` naming `/repo/src`, a workspace
link. So each shared folder is bound twice, at its own place in the checkout (those paths keep
working) and at the same place in the worktree (`.venv/bin/python` and node's lookup from the
worktree's files find it). The rest of the checkout's path, hidden anyway (mounts.py), shows links
to the worktree's own top-level entries: `/repo/src` in that `.pth` reaches the worktree's `src`,
never the checkout's, whose files stay hidden.

The shared folders are the operator's, made by their own install: nothing a worker writes reaches
them (read-only), and a link inside one leads only to what the sandbox shows anyway (hidden trees
stay hidden, the checkout shows the worktree).
"""

from __future__ import annotations

import os
from pathlib import Path

from pilothouse.providers.confine.repoview import real, within
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import RunSpec


def shared_folders(spec: RunSpec, main: Path | None) -> list[tuple[str, Path]]:
    """(path relative to the checkout, its real path) of each `sandbox.share` entry that exists.

    None when the run works in the main checkout itself: the folders are there already."""
    raw = spec.extra.get("sandbox_share") or []
    if main is None or not raw:
        return []
    out: list[tuple[str, Path]] = []
    for entry in raw:
        rel = str(entry).strip().strip("/")
        if not rel or rel.startswith("~") or os.path.isabs(str(entry)) or ".." in Path(rel).parts:
            raise UserError(f"sandbox.share in .ai/project.yaml: {entry!r} must be a folder inside the "
                            "repository (say .venv or node_modules)")
        target = real(main / rel)
        # the checkout holds merged work: a link there must not carry the bind out of it
        if not within(target, main) or target == main:
            raise UserError(f"sandbox.share in .ai/project.yaml: {rel} leads out of {main} (to {target}); "
                            "share the folder itself, or name an outside path in sandbox.read")
        if target.exists():
            out.append((rel, target))
    return out


def share_args(shared: list[tuple[str, Path]], main: Path, workdir: Path, *, writer: bool,
               shut: list[Path], taken: set[str]) -> list[str]:
    """bwrap arguments for the shared folders and the checkout's links to the worktree.

    Applied after the checkout's empty stand-in (and the worktree's bind) are in place. `taken`:
    top-level names of the checkout the plan already mounts (its .git, the holdout)."""
    for _rel, src in shared:
        for h in shut:
            if within(h, src) and h != main:
                raise UserError(f"sandbox.share in .ai/project.yaml: {src} contains {h}, which the sandbox "
                                "hides; share the dependency folder itself")
    args: list[str] = []
    tops = {Path(rel).parts[0] for rel, _src in shared}
    for rel, src in shared:
        args += ["--ro-bind", str(src), str(main / rel)]
        in_tree = workdir / rel
        # the worktree is the worker's: a link or a file where the folder goes is left alone (the
        # bind would land wherever it points), and a read-only worktree takes no new mount point
        if real(in_tree) != in_tree or (os.path.lexists(in_tree) and in_tree.is_dir() != src.is_dir()):
            continue
        if not writer and not os.path.lexists(in_tree):
            continue
        args += ["--ro-bind", str(src), str(in_tree)]
    try:
        names = sorted(os.listdir(workdir))
    except OSError:
        names = []
    for name in names:
        if name in tops or name in taken or name == ".git":
            continue
        args += ["--symlink", str(workdir / name), str(main / name)]
    return args


def host_path(workdir: Path, path: Path, share: list[str]) -> Path:
    """Where on the host a path the sandbox of `workdir` shows lives: a path in one of its shared
    folders (`sandbox.share`) is the main checkout's, whose folder is bound there; else `path`."""
    from pilothouse.providers.confine.repoview import git_paths, main_checkout

    workdir = real(workdir)
    p = Path(os.path.normpath(workdir / path))
    if not share or not within(p, workdir):
        return p
    main = main_checkout(workdir, git_paths(workdir)[1])
    if main is None:
        return p
    rel = p.relative_to(workdir)
    for entry in share:
        folder = Path(str(entry).strip().strip("/"))
        if folder.parts and rel.parts[:len(folder.parts)] == folder.parts:
            return main / rel
    return p
