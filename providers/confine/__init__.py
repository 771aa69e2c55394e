"""Confinement of worker processes with bubblewrap.

A worker that edits code is a program we did not write, driven by a model we do not control; the
agent CLIs' own permission rules guard against mistakes, not against a model that tries. So every
launch goes through prepare(), which wraps the runner's argv in `bwrap`:

- the whole filesystem read-only; a private /tmp; a fresh minimal /proc (own pid namespace, so no
  other process's environ is readable) and /dev;
- the user's home, pilothouse's own config/data/state/cache dirs (other runs' sandboxes, other
  worktrees, logs, the file key store) and XDG_RUNTIME_DIR (keyring / D-Bus sockets) hidden under
  empty read-only tmpfs; only what the runner needs is bound back in, read-only (its interpreter,
  its installed CLI, the run's credential);
- the operator's checkout of a worktree's repository hidden too, apart from its `.git` (read-only),
  so its untracked files (`.env`) stay out; what a tool needs from outside is named in the
  project's `sandbox.read` (repoview.py, docs/sandbox.md);
- read-write: the run's own sandbox dirs (its HOME/XDG dirs; the sandbox's own records stay
  read-only), the provider's shared cache, the runner's declared writable paths and — for
  code/resume/test only — the worktree. Inside it, `.git` (no planted hooks, no repointing for git
  commands run later outside), `.ai/project.yaml` and `.ai/runtime` stay read-only;
- a user namespace with every capability dropped even when pilothouse runs as root (root keeps
  CAP_SYS_ADMIN under bwrap otherwise and could simply remount / read-write), no nested user
  namespaces, its own pid/ipc/uts namespaces, a session of its own without a controlling terminal
  (started so by every launcher: no TIOCSTI into our terminal), and --die-with-parent so an aborted
  dispatch leaves nothing behind.

A write outside then fails in the kernel with EROFS/EACCES (ENOENT for hidden trees), which the
runners report as tool errors and dispatch counts as permission denials. The network stays (workers
call their API from inside); `network: none` gives the run an empty network namespace in which only
a local model on the host's loopback stays reachable (providers/netrelay.py). The mount plan itself
is in mounts.py.

Policy: writers (code/resume/test) never launch unconfined unless the project says
`confinement: off` (RunSpec.extra["confinement"] == "off", read by dispatch from the main
checkout — never from the worktree, which its worker can edit); read-only modes run unconfined
with one warning when bwrap cannot work here. Gates run worker-written code: prepare_command(). Before trusting bwrap the first time (and whenever its
binary changes) the functional probe in probe.py is run.

Modules, lowest first: bwrap (is bubblewrap here and working), repoview (what of the repository a
run sees), shared (`sandbox.share`), mounts (the mount plan), probe and probe_reads (the functional proof), policy (who must be confined; prepare/prepare_command). Import from here.
"""

from pilothouse.providers.confine.bwrap import (
    INSTALL_FIX,
    WRITER_MODES,
    available,
    bwrap_path,
    bwrap_version,
    namespace_fix,
)
from pilothouse.providers.confine.policy import (
    GATE_SANDBOX,
    OPT_OUT,
    confinement_off,
    confinement_required,
    prepare,
    prepare_command,
    project_setting_near,
    signal_sandbox,
    status,
    trusted_project_root,
    unconfined_reason,
    wrap,
)
from pilothouse.providers.confine.shared import host_path

__all__ = [
    "GATE_SANDBOX", "INSTALL_FIX", "OPT_OUT", "WRITER_MODES", "available", "bwrap_path", "bwrap_version",
    "confinement_off", "confinement_required", "host_path", "namespace_fix", "prepare", "prepare_command",
    "project_setting_near", "signal_sandbox", "status", "trusted_project_root", "unconfined_reason", "wrap",
]
