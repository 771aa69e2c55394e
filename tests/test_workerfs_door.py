"""providers/workerfs.py is the only door to what workers write: an AST scan of core/, providers/
and tui/ fails on any other open, Path.read_*/write_*, os.chmod, shutil.*, os.remove/unlink/
rename/replace (or their Path forms) of a path under a worktree, a run folder or a run HOME.

Such a path is recognised by what it is made from: the run's sandbox (`sb`, `sandbox`,
`spec.sandbox`, its `.home`/`.config`/`.state`/... dirs), a worktree (`workdir`, `worktree`,
`wt`), the sim's served log; and any local name assigned from one of those in the same function.
The allow-list below is small and says for each entry why that call may stay.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOOR = "providers/workerfs.py"
SCANNED = ("core", "providers", "tui")

WORKER_WORDS = re.compile(
    r"\b(sb|sandbox|wt|wt_\w+|cwd|checkout|served_log|run_root|run_folder|rundir)\b|\w*(workdir|worktree)\w*"
    r"|\.(home|config|state|data|cache)\b(?!_)")
FILE_FUNCS = {("os", "open"), ("os", "chmod"), ("os", "remove"), ("os", "unlink"), ("os", "rename"),
              ("os", "replace"), ("os", "lchmod"), ("os", "chown")}
PATH_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "chmod", "unlink", "rename",
                "replace", "rmdir", "touch"}

# (file, function, the call as written) -> why it may stay
_RUN_ROOT = ("the run root (run.json, task.md, the lock, the credential link) is bound read-only into the "
             "sandbox (confine/mounts.py `add(sb.root, 2)`); only its HOME/XDG subdirs are the worker's")
_GIT_DIR = "the repository's git dir (.git/worktrees/NAME/commondir): outside the worktree, read-only to the worker"
_WT_ROOT = "worktree_root(): the host's folder that holds the worktrees (hidden from every worker), no worktree"
ALLOWED: dict[tuple[str, str, str], str] = {
    ("providers/sandbox.py", "link_credential", ""): _RUN_ROOT,
    ("providers/sandbox.py", "drop_credential", ""): _RUN_ROOT,
    ("core/dispatch/prepare.py", "find_previous_run", ""): _RUN_ROOT + "; the verdict is in the host's logs dir",
    ("core/dispatch/run.py", "execute", "link.unlink"): "runs/<id>, the host's own link to a resumed run's folder",
    ("core/dispatch/prepare.py", "_project_settings", "f.read_text"):
        "trusted_project_root: the main checkout's .ai/project.yaml, never the worktree's",
    ("core/executor/node.py", "_dispatch", ""):
        "a cluster node's own run dir (task, settings, out/err), beside the checkout, never inside it",
    ("core/git/setup_cache.py", "run_cached", ""):
        "staging is under the host's cache dir; what it copies from the worktree passes _unlinked first",
    ("core/git/ship.py", "_land", ""):
        "the operator's own checkout of the base branch: their uncommitted copy of a record ship changes, "
        "saved and put back if the fast-forward fails",
    ("providers/confine/policy.py", "trusted_project_root", "common.read_text"): _GIT_DIR,
    ("providers/confine/repoview.py", "git_paths", "common.read_text"): _GIT_DIR,
    ("core/git/gates.py", "run_command", "shutil.rmtree"): "the gate's own scratch HOME, made by the host",
    ("core/git/holdout.py", "run_holdout", ""):
        "the holdout copy: every folder on the way is checked not to be a link just before; rmtree follows none",
    ("core/git/integration.py", "land", "pending.unlink"): _WT_ROOT,
    ("providers/confine/probe.py", "probe_spec", ""): "the probe's own throwaway sandbox, made before anything runs",
    ("providers/confine/probe.py", "_checks_in", ""): "removes probe litter from the operator's places",
    ("providers/confine/probe_reads.py", "read_checks", ""): "removes the probe's own planted files",
    ("core/git/prove.py", "prove", "shutil.rmtree"):
        "init/check's own throwaway checkout of the base commit (no worker wrote it), removed only when "
        "`git worktree remove` fails; rmtree removes links, never follows them",
}


def _call_name(node: ast.Call) -> tuple[str, ast.expr | None]:
    """(how the call is written, the path expression it acts on) or ("", None)."""
    f = node.func
    first = node.args[0] if node.args else None
    if isinstance(f, ast.Name) and f.id == "open":
        return "open", first
    if isinstance(f, ast.Attribute):
        base = f.value
        if isinstance(base, ast.Name) and (base.id, f.attr) in FILE_FUNCS:
            return f"{base.id}.{f.attr}", first
        if isinstance(base, ast.Name) and base.id == "shutil":
            return f"shutil.{f.attr}", first
        if f.attr in PATH_METHODS and not (isinstance(base, ast.Name) and base.id in ("os", "io", "json")):
            return f"{ast.unparse(base)}.{f.attr}", base
    return "", None


def _tainted(func: ast.AST) -> set[str]:
    """Local names that hold a worker path (assigned from a worker word or another such name)."""
    names: set[str] = set()
    assigns = sorted((n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For, ast.With))),
                     key=lambda n: n.lineno)
    for _ in range(2):  # a name assigned from one made later in a loop body
        for n in assigns:
            if isinstance(n, ast.Assign | ast.AnnAssign):
                value, targets = n.value, (n.targets if isinstance(n, ast.Assign) else [n.target])
            elif isinstance(n, ast.For):
                value, targets = n.iter, [n.target]
            else:
                for item in n.items:
                    if item.optional_vars is not None and _mentions(item.context_expr, names):
                        names |= {x.id for x in ast.walk(item.optional_vars) if isinstance(x, ast.Name)}
                continue
            if value is not None and _mentions(value, names):
                for t in targets:
                    names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    return names


def _mentions(expr: ast.expr, tainted: set[str]) -> bool:
    text = ast.unparse(expr)
    if WORKER_WORDS.search(text):
        return True
    return any(isinstance(x, ast.Name) and x.id in tainted for x in ast.walk(expr))


@functools.cache
def worker_path_calls() -> tuple[tuple[str, str, str, str], ...]:
    """(file, function, the call as written, where) of every file call on a worker path."""
    found: list[tuple[str, str, str, str]] = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == DOOR:
                continue
            tree = ast.parse(path.read_text(), filename=rel)
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                tainted = _tainted(func)
                for node in ast.walk(func):
                    if not isinstance(node, ast.Call):
                        continue
                    how, target = _call_name(node)
                    if how and target is not None and _mentions(target, tainted):
                        found.append((rel, func.name, how, f"{rel}:{node.lineno} in {func.name}(): {how}"))
    return tuple(sorted(set(found)))


def violations(allowed: dict[tuple[str, str, str], str] = ALLOWED) -> list[str]:
    return [where for rel, fn, how, where in worker_path_calls()
            if (rel, fn, how) not in allowed and (rel, fn, "") not in allowed]


def test_worker_written_paths_are_touched_only_through_the_door():
    bad = violations()
    assert not bad, ("host code touches a worker-written path without providers/workerfs.py (use its read/"
                     "write/append/walk/remove/chmod, or add an ALLOWED entry saying why):\n  " + "\n  ".join(bad))


def test_the_scan_sees_a_plain_write_into_a_run_folder(tmp_path):
    # the rule itself: the patterns attack 1 and 2 used are what it catches
    src = ("def build(spec):\n    cfg = spec.sandbox.config / 'claude'\n    (cfg / 's.json').write_text('x')\n"
           "def record(self):\n    with self.served_log.open('a') as fh:\n        fh.write('x')\n")
    tree = ast.parse(src)
    hits = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef):
            tainted = _tainted(func)
            hits += [_call_name(n)[0] for n in ast.walk(func) if isinstance(n, ast.Call)
                     and _call_name(n)[1] is not None and _mentions(_call_name(n)[1], tainted)]  # type: ignore[arg-type]
    assert sorted(hits) == ["cfg / 's.json'.write_text", "self.served_log.open"]


def test_every_allowed_entry_is_still_needed():
    """An entry whose call is gone is removed, so the list stays the exceptions that exist."""
    calls = worker_path_calls()
    for rel, fn, how in ALLOWED:
        assert any(c[0] == rel and c[1] == fn and how in ("", c[2]) for c in calls), \
            f"ALLOWED entry {(rel, fn, how)} matches no call any more: remove it"
