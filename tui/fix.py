"""Fixing a task without leaving the cockpit: a shell in its worktree, $EDITOR on one of its files,
the full diff against its base, every gate output with search. From the Tasks panel, a problem
(the Problems panel or its dialog) or a run detail.

The shell and the editor get the terminal the way k9s and lazygit lend it (App.suspend); when
they exit, a task stopped on a problem that takes `retry` is offered the retry, which the
supervisor applies by committing what the operator left and running the gate again. The
worktree is the worker's: the editor opens only a regular file inside it, never through a link.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.core.queries.work import TaskRow
    from pilothouse.core.stops.problems import Problem
    from pilothouse.tui.app import CockpitApp

FIX_ACTIONS = {"shell", "edit_file", "diff", "gate_log"}
_TITLES = {"shell": "shell", "edit_file": "edit", "diff": "diff", "gate_log": "gate log"}
# what the operator reads as the shell opens: it is theirs, unconfined, in a tree a worker wrote
SHELL_BANNER = ("an UNCONFINED shell in the worktree of {where}\n"
                "  {cwd}\n"
                "  it is yours, outside the sandbox, every key readable; the files are a worker's: run nothing you\n"
                "  have not read. git here runs with fsmonitor, hooks and external diff off; a repository nested\n"
                "  in the worktree keeps its own drivers, so run no git inside one. Exit to go back to the cockpit.")


def no_worktree(task: TaskRow, line: str | None = None) -> str:
    """Why a task has no worktree to work in, and what holds its work instead (`line`: the job's
    integration branch, when known)."""
    if task.merged_sha or task.state == "done":
        holder = task.merged_sha[:10] if task.merged_sha else line
        where = f" into {line}" if line else ""
        also = f"; D shows its change, {holder} holds it (git switch -c fix {holder})" if holder else "; D shows its change"
        if not task.branch and not task.worktree:
            also = f"; {holder} holds it (git switch -c fix {holder})" if holder else ""
        return f"{task.task} is merged{where}: its worktree was removed after the merge{also}"
    if not task.worktree:
        return f"{task.task} has no worktree yet: it gets one when its builder starts"
    return f"the worktree of {task.task} is gone (cleaned up); D shows its change from its branch"


def _missing(action: str, task: TaskRow) -> bool:
    """Whether what the fix key acts on is absent (cheap: asked on every footer refresh). The editor
    says why itself (merged, not started); the gate log says so when no gate ran."""
    if action == "shell":
        return not (task.worktree and Path(task.worktree).is_dir())
    if action == "diff":
        return not (task.worktree or task.branch)
    return False


class FixMixin:
    """Mixed into CockpitApp; its BINDINGS list FIX_BINDINGS (tui/bindings.py)."""

    def _app(self) -> CockpitApp:
        return self  # type: ignore[return-value]

    # --- what the keys act on -----------------------------------------------------------------

    def fix_target(self, problem_too: bool = True) -> tuple[TaskRow, Problem | None] | None:
        """The task the screen in front is about, and its open problem: the dashboard's selected
        task (Tasks panel) or problem's task (Problems panel), a problem dialog's, a run detail's."""
        app = self._app()
        q = app.queries
        if q is None or app.layout is None:
            return None
        screen = app.screen
        problem: Problem | None = None
        if screen is app.screen_stack[0]:
            dash = app.dashboard
            if dash.focused is dash.problems and dash.problems.current is not None:
                problem = dash.problems.current
                job, name = problem.job, problem.task
            elif dash.focused is dash.tasks and dash.current_task is not None:
                job, name = dash.current_task.job, dash.current_task.task
            else:
                return None
        else:
            # imported only when another screen is in front (they are loaded by then): asked on the
            # dashboard's first frame, the imports were part of the first paint
            from pilothouse.tui.screens.detail import RunDetail
            from pilothouse.tui.screens.problem import ProblemDialog

            if isinstance(screen, ProblemDialog):
                problem = screen.problem
                job, name = problem.job, problem.task
            elif isinstance(screen, RunDetail):
                job, name = screen.job, screen.task_id
            else:
                return None
        if not name:
            return None
        # the Tasks panel's row is fresh (events update it): no query on every footer refresh
        current = app.dashboard.current_task if screen is app.screen_stack[0] else None
        task = current if current is not None and (current.job, current.task) == (job, name) else q.task(job, name)
        if task is None:
            return None
        if problem is None and problem_too:
            problem = next((p for p in q.problems() if p.job == job and p.task == name), None)
        return task, problem

    def fix_allowed(self, action: str) -> bool:
        target = self.fix_target(problem_too=False)  # asked for every binding on every footer refresh
        return target is not None and not _missing(action, target[0])

    def why_not(self, action: str, task: TaskRow) -> str | None:
        """Why the key is not offered on `task` (its footer entry hidden), or None when it is."""
        if not _missing(action, task):
            return None
        if action == "shell":
            return no_worktree(task, self._line(task))
        return f"{task.task} has no branch yet: it gets one when its builder starts"

    async def run_action(self, action: Any, default_namespace: Any = None, namespaces: Any = None) -> bool:
        """A fix key hidden on this task still answers when pressed: silence reads as a key that did
        not arrive (the footer keeps it out, so the keys on offer fit in 80 columns)."""
        app = self._app()
        if action in FIX_ACTIONS and default_namespace in (None, app):
            target = self.fix_target(problem_too=False)
            why = self.why_not(action, target[0]) if target is not None else None
            if why:
                app.notify(why, title=_TITLES.get(action, action), severity="warning")
                return True
        return await super().run_action(action, default_namespace, namespaces)  # type: ignore[misc]

    def _line(self, task: TaskRow) -> str | None:
        """The job's integration branch, or None when project.yaml does not load."""
        from pilothouse.core.records.project import load_project

        layout = self._app().layout
        if layout is None:
            return None
        try:
            return f"{load_project(layout).integration_branch}/{task.job}"
        except UserError:
            return None

    # --- the terminal, lent ---------------------------------------------------------------------

    def lend_terminal(self, argv: list[str], cwd: Path, banner: str) -> int | None:
        """Run `argv` in `cwd` with the operator's terminal; its exit code, or None when this
        cockpit has no terminal to lend (in a browser)."""
        from pilothouse.core.git.shell_env import shell_env
        from textual.app import SuspendNotSupported

        app = self._app()
        # the shell and the editor (its git plugins, a git-aware prompt) run git in the worker's tree
        env = shell_env({**os.environ, "PILOTHOUSE_WORKTREE": str(cwd)})
        try:
            with app.suspend():
                # a clear screen first: the cockpit's last frame is not left above the prompt
                sys.__stdout__.write(f"\x1b[H\x1b[2J\npilothouse: {banner}\n")  # type: ignore[union-attr]
                sys.__stdout__.flush()  # type: ignore[union-attr]
                return subprocess.call(argv, cwd=cwd, env=env)
        except SuspendNotSupported:
            if not app.is_headless:
                return None
        # headless (tests, scripted use): no screen to give back; the command runs all the same
        return subprocess.call(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)

    def _no_terminal(self, what: str) -> None:
        self._app().notify(f"{what} needs a terminal: this cockpit has none to lend (in a browser, use "
                           "`pilothouse view` in a terminal)", title=what, severity="error", timeout=8)

    def action_shell(self) -> None:
        app = self._app()
        target = self.fix_target()
        if target is None:
            return
        task, _ = target
        if not task.worktree or not Path(task.worktree).is_dir():
            app.notify(no_worktree(task, self._line(task)), title="shell", severity="warning")
            return
        cwd = Path(task.worktree)
        shell = os.environ.get("SHELL") or "/bin/sh"
        code = self.lend_terminal([shell], cwd, SHELL_BANNER.format(where=f"{task.job}/{task.task}", cwd=cwd))
        if code is None:
            self._no_terminal("shell")
            return
        self.after_fix(task)

    def action_edit_file(self) -> None:
        from pilothouse.tui.screens.modals import PickModal

        app = self._app()
        target = self.fix_target()
        if target is None:
            return
        task, _ = target
        if not task.worktree or not Path(task.worktree).is_dir():
            app.notify(no_worktree(task, self._line(task)), title="edit", severity="warning")
            return
        try:
            files = task_files(task, self._base(task))
        except UserError as exc:
            app.notify(str(exc), title="edit", severity="error")
            return
        if not files:
            app.notify(f"{task.task} changed no file yet: open a shell (!) to edit any", title="edit")
            return

        def picked(path: str | None) -> None:
            if path:
                self.edit(task, path)

        app.push_screen(PickModal(f"edit · {task.task}", "a file the task changed", files), picked)

    def edit(self, task: TaskRow, rel: str) -> None:
        app = self._app()
        cwd = Path(task.worktree)  # type: ignore[arg-type]
        try:
            path = inside(cwd, rel)
        except UserError as exc:
            app.notify(str(exc), title="edit", severity="error", timeout=8)
            return
        editor = shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")
        code = self.lend_terminal([*editor, str(path.relative_to(cwd.resolve()))], cwd,
                                  f"{editor[0]} on {rel} in the worktree of {task.job}/{task.task}")
        if code is None:
            self._no_terminal("edit")
            return
        self.after_fix(task)

    def after_fix(self, task: TaskRow) -> None:
        """Back from the worktree: offer the reply that takes the operator's fix (retry)."""
        from pilothouse.tui.screens.modals import ConfirmModal

        app = self._app()
        app.refresh(layout=True)
        q = app.queries
        if q is None:
            return
        problem = next((p for p in q.problems() if p.job == task.job and p.task == task.task), None)
        if problem is None or "retry" not in problem.replies or q.replies(problem.code, waiting=True):
            return
        changed = uncommitted(Path(task.worktree)) if task.worktree else []
        what = (f"{len(changed)} file{'s' * (len(changed) != 1)} changed, not committed yet: the supervisor "
                "commits them" if changed else "nothing left uncommitted")

        def confirmed(ok: bool | None) -> None:
            if ok:
                app.answer(problem, "retry")

        app.push_screen(ConfirmModal(f"retry · {problem.code}", f"Back from the worktree of {task.task} ({what}).\n"
                                     f"Retry {problem.kind} with your fix? The gate runs again on it.", "Retry"),
                        confirmed)

    # --- views ----------------------------------------------------------------------------------

    def _base(self, task: TaskRow) -> str:
        if task.base:
            return task.base
        from pilothouse.core.records.project import load_project

        layout = self._app().layout
        assert layout is not None
        return f"{load_project(layout).integration_branch}/{task.job}"  # the job's integration line

    def action_diff(self) -> None:
        from pilothouse.tui.screens.diff import DiffScreen, task_diff

        app = self._app()
        target = self.fix_target()
        layout = app.layout
        if target is None or layout is None:
            return
        task, _ = target
        try:
            files, note = task_diff(layout, task, self._base(task))
        except (UserError, subprocess.SubprocessError, OSError) as exc:
            app.notify(f"no diff: {exc}", title="diff", severity="error")
            return
        app.push_screen(DiffScreen(f"{task.job} / {task.task} · its change against {self._base(task)[:12]}",
                                   files, note))

    def action_gate_log(self) -> None:
        """Every gate run of the task, read through the event index in a worker (however far back in
        the log), then shown; a problem's own copy of the output when the log has none."""
        from pilothouse.core.git.gates import gate_log
        from pilothouse.tui.screens.run_sections import task_events

        app = self._app()
        target = self.fix_target()
        layout = app.layout
        if target is None or layout is None:
            return
        task, problem = target
        tail: Any = (problem.evidence.get("output_tail") or problem.evidence.get("gate_output")) if problem else None
        origin = app.screen

        def work() -> None:
            try:
                events = task_events(layout, task.job, task.task, frozenset({"gate.finished"}))
                full = None
                if events:
                    data = events[-1].get("data") or {}
                    full = read_log(gate_log(layout.runtime, task.job, task.task, str(data.get("level") or "fast")))
            except Exception as exc:  # noqa: BLE001 - a damaged index or log: say so, keep the cockpit up
                app.call_from_thread(app.notify, f"no gate log: {exc}", title="gate log", severity="error")
                return
            app.call_from_thread(show, events, full)

        def show(events: list[dict[str, Any]], full: str | None) -> None:
            from pilothouse.tui.screens.gatelog import GateLog, gate_lines

            if app.screen is not origin:
                return  # the operator moved on while it was read
            app.push_screen(GateLog(f"{task.job} / {task.task} · gate output ({len(events)} run"
                                    f"{'s' * (len(events) != 1)})",
                                    gate_lines(events, tail if isinstance(tail, str) else None, full)))

        app.run_worker(work, thread=True, group="gatelog", exclusive=True, exit_on_error=False)


def inside(root: Path, rel: str) -> Path:
    """`rel` under `root` as a regular file reached through no link (a worker's link could point the
    editor at the operator's own files outside the worktree)."""
    base = root.resolve()
    path = base / rel
    probe = base
    for part in Path(rel).parts:
        probe = probe / part
        if probe.is_symlink():
            raise UserError(f"{rel} is a link (to {os.readlink(probe)}): open it in a shell if you mean to")
    if not path.resolve().is_relative_to(base):  # `..` in the name
        raise UserError(f"{rel} is outside the worktree")
    if not path.is_file():
        raise UserError(f"{rel} is not a regular file in the worktree (removed?)")
    return path


def read_log(path: Path, limit: int = 2 << 20) -> str | None:
    """A gate's kept output: a regular file opened through no link, its last `limit` bytes."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        fh.seek(max(0, info.st_size - limit))
        return fh.read().decode("utf-8", "replace")


def task_files(task: TaskRow, base: str) -> list[str]:
    from pilothouse.core.git.checkout import changed_files
    from pilothouse.core.git.worktrees import GitError

    try:
        return changed_files(task.worktree, base, uncommitted=True)  # type: ignore[arg-type]
    except GitError as exc:
        raise UserError(f"cannot list the files of {task.task}: {exc}") from None


def uncommitted(worktree: Path) -> list[str]:
    from pilothouse.core.git.worktrees import dirty_paths

    try:
        return dirty_paths(worktree)
    except Exception:  # noqa: BLE001 - a broken checkout: the retry itself says what is wrong
        return []
