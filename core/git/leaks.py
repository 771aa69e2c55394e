"""Secrets stop at the commit: what a worker wrote is scanned before pilothouse commits or merges it.

A worker can read its own credential (it must, to call its model) and write it into a file; a
commit would carry it to the task branch, the integration branch and every clone. So the staged
diff of every commit pilothouse makes (the builder's work, the operator's fix taken by a retry)
and the branch a merge brings in are scanned for every configured key in every form the redactor
knows (raw, JSON, URL, base64) and for the shapes of common credentials (providers/guard.py):
the lines added, and the names a worker chose too: a file's (an empty `kc_name_<KEY>.txt` adds no
line, yet its name would then sit in every later prompt that lists the tree), a link's target,
the commit's message, the branch's name. A hit is a SecretInDiff naming the place, never the value.

Plain subprocess, not worktrees.git: that module commits through this one, and a diff of a binary
file is bytes that text-mode git output would choke on.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pilothouse.providers.errors import UserError
from pilothouse.providers.scan import Hit, message_hits, ref_hits, scan_diff, scan_name

# the worker's repo config and attributes must not choose what we see: no external diff, no
# textconv, every file as text (a `-diff` attribute would otherwise hide a file's content)
_DIFF = ("-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--text",
         "--no-renames", "-U0", "--src-prefix=a/", "--dst-prefix=b/")


class SecretInDiff(UserError):
    """Work that would carry a credential into a commit; `hits` say where (file, line, kind)."""

    def __init__(self, hits: list[Hit], what: str, outcome: str = "nothing was committed") -> None:
        self.hits = hits
        first = hits[0]
        where = f"{first.path} line {first.line}" if first.line else first.path
        more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
        super().__init__(f"{what} holds {_article(first.kind)} in {where}{more}; {outcome}")

    def places(self) -> list[str]:
        return [f"{h.path}:{h.line}: {h.kind}" for h in self.hits[:20]]


def _article(kind: str) -> str:
    return kind if kind.startswith(("a ", "an ")) else f"a {kind}"


def diff_hits(cwd: Path | str, *spec: str) -> list[Hit] | None:
    """Credentials added by `git diff SPEC` in `cwd`; None when git cannot make that diff."""
    from pilothouse.providers.redact import configured_redactor

    proc = subprocess.run(["git", *_DIFF, *spec], cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return None
    return scan_diff(proc.stdout.decode("utf-8", "replace"), configured_redactor())


def check_staged(cwd: Path | str, what: str, message: str | None = None) -> None:
    """Raise SecretInDiff when the index of `cwd` adds a credential to HEAD, in a file or a file's
    name, or when the commit's `message` holds one (fail closed: a diff that cannot be made is not
    committed either)."""
    from pilothouse.providers.redact import configured_redactor

    hits = diff_hits(cwd, "--cached", "HEAD")
    if hits is None:
        raise UserError(f"cannot scan the changes in {cwd} for credentials (git diff --cached failed): "
                        f"check the checkout with git -C {cwd} status")
    if message is not None:
        hits += scan_name(message, configured_redactor(), "the commit message", "its message")
    if hits:
        raise SecretInDiff(hits, what)


def check_branch(cwd: Path | str, base: str, branch: str) -> None:
    """Raise SecretInDiff when `branch` adds a credential since it left `base` (three-dot diff): in
    its files, their names, its commits' messages or its own name. A branch git cannot diff is left
    to the merge, which says why it cannot take it."""
    from pilothouse.providers.redact import configured_redactor

    redactor = configured_redactor()
    hits = (diff_hits(cwd, f"{base}...{branch}", "--") or []) + ref_hits([branch], redactor)
    hits += message_hits(cwd, [f"{base}..{branch}", "--"], redactor)
    if hits:
        raise SecretInDiff(hits, masked_name(branch), "nothing was merged")


def masked_name(name: str) -> str:
    from pilothouse.providers.redact import configured_redactor
    from pilothouse.providers.scan import masked

    return masked(name, configured_redactor())
