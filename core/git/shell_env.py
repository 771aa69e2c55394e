"""The environment of the operator's shell in a worker's worktree (the cockpit's `!`): git there
runs nothing the worker chose.

That shell is unconfined: the operator's own, with every key readable. The worktree is the
worker's, and a repository it nested there carries its own `.git/config`: a plain `git status`
(or a prompt that runs one on every line) would start that config's `core.fsmonitor`, its hooks,
its external diff or its pager as the operator. Settings given through `GIT_CONFIG_COUNT` /
`GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n` outrank every config file, a nested repository's too,
and reach each git the shell starts, so they turn those off for the whole shell; the pager and
the editor are pinned through GIT_PAGER/GIT_EDITOR, which outrank config as well.

What this cannot turn off: a driver a nested repository's config defines and its `.gitattributes`
picks (a textconv for `git log -p`, a clean filter): those keys are named by the worker, so no
fixed setting outranks them. The cockpit says so when it opens the shell.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

# git's own diff for `git diff` where a config names diff.external: an empty value would make
# every `git diff` fail ("cannot run"), so diff.external names this instead. git runs it through
# the shell with (path, old-file, old-hex, old-mode, new-file, new-hex, new-mode) appended; a
# non-zero exit stops git, and `diff --no-index` exits 1 on a difference.
_INTERNAL_DIFF = ('f() { git --no-pager -c core.fsmonitor=false diff --no-index --no-ext-diff --no-textconv '
                  '-- "$2" "$5"; [ $? -le 1 ]; }; f')

SHELL_GIT_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("diff.external", _INTERNAL_DIFF),
    # a nested repository registered as a submodule: status and diff do not run git inside it
    ("diff.ignoreSubmodules", "dirty"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
)


def _operators(var: str) -> str | None:
    """`git var VAR` outside any repository: the operator's own pager or editor (env, global or
    system config, git's default), never a worktree's."""
    try:
        proc = subprocess.run(["git", "var", var], cwd="/", capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def shell_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` (the cockpit's environment) with SHELL_GIT_CONFIG added after any GIT_CONFIG_COUNT
    entries the operator set, and GIT_PAGER/GIT_EDITOR pinned to the operator's own."""
    env = dict(base)
    try:
        n = int(env.get("GIT_CONFIG_COUNT") or 0)
    except ValueError:
        n = 0  # git itself refuses a bad count; ours make it a good one
    n = max(n, 0)
    for i, (key, value) in enumerate(SHELL_GIT_CONFIG, start=n):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(n + len(SHELL_GIT_CONFIG))
    for var in ("GIT_PAGER", "GIT_EDITOR"):
        if not env.get(var) and (mine := _operators(var)):
            env[var] = mine
    return env
