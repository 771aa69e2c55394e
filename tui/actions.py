"""What the operator's keys do: each goes through core, in a worker thread, and is drawn only
when its event comes back. A reply core refuses (UserError) becomes a notification with core's
own message, which names what would fit instead."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.core.stops.problems import Problem
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.detail import RunDetail

# actions that need the dashboard to be the screen in front
_DASHBOARD_ONLY = {"reply", "new_job", "edit_job", "abort_run", "supervisor", "ship", "usage", "settings",
                   "timeline"}


def who() -> str:
    # `pilothouse serve` names each browser session in its cockpit's environment
    served = os.environ.get("PILOTHOUSE_WHO", "").strip()
    if served:
        return served[:80]
    try:
        return f"{getpass.getuser()}@cockpit"
    except Exception:  # noqa: BLE001 - no passwd entry in a container
        return "cockpit"


class ActionsMixin:
    """Mixed into CockpitApp (whose BINDINGS list REPLY_BINDINGS and JOB_BINDINGS)."""

    def _app(self) -> CockpitApp:
        return self  # type: ignore[return-value]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        app = self._app()
        from pilothouse.tui.fix import FIX_ACTIONS

        if action in FIX_ACTIONS:
            return app.fix_allowed(action)
        if action not in _DASHBOARD_ONLY:
            return True
        if app.layout is None or app.screen is not app.screen_stack[0]:
            return False
        dash = app.dashboard
        if action == "reply":
            problem = dash.current_problem
            if problem is None or problem.code in dash.problems.pending:
                return False  # no problem here, or its answer already waits for the supervisor
            return bool(parameters) and parameters[0] in problem.replies
        if action in ("edit_job", "timeline"):
            return dash.selected_job is not None
        if action == "ship":
            job = dash.jobs.jobs.get(dash.selected_job or "")
            return job is not None and job.state == "accepted"
        if action == "abort_run":
            task = dash.current_task
            return task is not None and bool(task.run_id) and task.state == "running"
        return True

    # --- running core calls ---------------------------------------------------------------------

    def call_core(self, what: str, fn: Callable[[], Any], done: str | Callable[[Any], str] | None = None) -> None:
        """Run a core call in a thread; UserError → its message, anything else → a short error."""
        app = self._app()

        def work() -> None:
            try:
                result = fn()
            except UserError as exc:
                app.call_from_thread(app.notify, str(exc), title=what, severity="error", timeout=8)
            except ImportError as exc:
                app.call_from_thread(app.notify, f"not available in this build: {exc.name}", title=what,
                                     severity="error")
            except Exception as exc:  # noqa: BLE001 - keep the cockpit up; say what failed
                app.call_from_thread(app.notify, f"{type(exc).__name__}: {exc}", title=what, severity="error")
            else:
                message = done(result) if callable(done) else done
                if message:
                    app.call_from_thread(app.notify, message, title=what, timeout=3)

        app.run_worker(work, thread=True, group="core", exit_on_error=False)

    # --- problems -------------------------------------------------------------------------------

    def action_reply(self, reply: str) -> None:
        dash = self._app().dashboard
        problem = dash.current_problem
        if problem is not None and problem.code not in dash.problems.pending:
            self.answer(problem, reply)

    def answer(self, problem: Problem, reply: str) -> None:
        app = self._app()
        layout = app.layout
        assert layout is not None
        from pilothouse.tui.screens.modals import ConfirmModal, WordsModal

        def send(words: str | None = None) -> None:
            from pilothouse.core.stops import answering

            def call() -> None:
                answering.act(layout, problem.code, reply, words, who=who())

            def sent(_: Any) -> str:
                if app.supervisor_alive():
                    return f"{reply} sent for {problem.code}"
                return (f"{reply} sent for {problem.code}; the supervisor is stopped: the answer applies "
                        f"when it starts ({app.key_for('supervisor.toggle', 'S')} starts it)")

            self.call_core(f"{reply} {problem.code}", call, done=sent)

        if reply in ("hint", "plan"):
            prompt = ("Words for the builder, who continues its own session" if reply == "hint"
                      else "Words for the assigner, who re-plans the job")

            def got(words: str | None) -> None:
                if words:
                    send(words)

            from pilothouse.tui.screens.problem import problem_context

            app.push_screen(WordsModal(f"{reply} · {problem.code} · {problem.task or problem.job}", prompt,
                                       context=problem_context(problem)), got)
            return
        from pilothouse.tui.consequences import ASKS_FIRST, consequence

        if reply in ASKS_FIRST:
            # merges or cancels work: one line says what, and only `y` sends it (Enter means no)
            try:
                line = consequence(app, problem, reply)
            except UserError as exc:
                app.notify(str(exc), title=f"{reply} {problem.code}", severity="error")
                return

            def confirmed(ok: bool | None) -> None:
                if ok:
                    send()

            if line is not None:
                app.push_screen(ConfirmModal(f"{reply} · {problem.code}", line, reply.capitalize()), confirmed)
                return
        send()

    def open_problem(self, code: str) -> None:
        from pilothouse.tui.screens.problem import ProblemDialog

        table = self._app().dashboard.problems
        problem = table.problems.get(code)
        if problem is not None:
            pending = table.pending.get(code)
            self._app().push_screen(ProblemDialog(problem, answered=pending.reply if pending else None))

    def run_detail(self) -> RunDetail:
        """The one run detail, installed once and composed off screen (prepare_run_detail)."""
        from pilothouse.tui.screens.detail import RunDetail

        app = self._app()
        if not app.is_screen_installed("run-detail"):
            app.install_screen(RunDetail(), "run-detail")
        return app.get_screen("run-detail", RunDetail)

    def prepare_run_detail(self) -> None:
        """Compose and mount the run detail now, after the first paint, while nobody waits: its first
        open is then a content update like every other (composing it on the first enter was most of
        that key's 200 ms p99)."""
        app = self._app()
        detail = self.run_detail()
        if not detail.is_running and app.is_running:
            app._register(app, detail)  # what push_screen does first (App._get_screen), without the push

    def open_run_detail(self, job: str | None, task: str | None, run: str | None = None) -> None:
        app = self._app()
        if not job:
            return
        detail = self.run_detail()
        if detail not in app.screen_stack:
            detail.open(job, task, run)
            app.push_screen("run-detail")

    # --- jobs -----------------------------------------------------------------------------------

    def refuse_unset(self, what: str) -> bool:
        """True (and says why) when the repository is not set up for pilothouse yet."""
        app = self._app()
        if app.setup_error:
            app.notify(app.setup_error, title=what, severity="error", timeout=8)
            return True
        return False

    def action_new_job(self) -> None:
        from pilothouse.tui.screens.jobform import JobForm

        app = self._app()
        layout = app.layout
        if layout is None or self.refuse_unset("new job"):
            return

        def save(form: dict[str, Any]) -> str:
            """Runs in the form's worker: a UserError keeps the form open with core's message."""
            from pilothouse.core.records import jobs
            from pilothouse.core.records.project import load_project

            load_project(layout)  # as `pilothouse job create` does: not set up, say so now
            jobs.create_job(layout, form["name"], form["request"], acceptance=form["acceptance"] or None,
                            attachments=form["attachments"])
            return f"job {form['name']} created"

        app.push_screen(JobForm(save=save), self._form_done)

    def _form_done(self, message: str | None) -> None:
        if message:
            self._app().notify(message, timeout=3)

    def action_edit_job(self) -> None:
        from pilothouse.tui.screens.jobform import JobForm, current_request

        app = self._app()
        name = app.dashboard.selected_job
        layout = app.layout
        if name is None or layout is None:
            return
        try:
            from pilothouse.core.records import jobs

            request = current_request(jobs.load_job(layout, name))
        except (UserError, ImportError) as exc:
            app.notify(str(exc), title=f"correct {name}", severity="error")
            return

        def save(form: dict[str, Any]) -> str:
            from pilothouse.core.records import jobs

            jobs.update_job(layout, name, form["request"])
            return f"job {name} corrected"

        app.push_screen(JobForm(name=name, request=request, save=save), self._form_done)

    def action_ship(self) -> None:
        """An accepted job onto the base branch, through core's ship (as `pilothouse ship JOB`)."""
        from pilothouse.tui.screens.modals import ConfirmModal

        app = self._app()
        layout, name = app.layout, app.dashboard.selected_job
        if layout is None or name is None:
            return
        try:
            from pilothouse.core.git.integration import base_branch
            from pilothouse.core.records.project import load_project

            base = base_branch(layout, load_project(layout))
        except (UserError, ImportError) as exc:
            app.notify(str(exc), title=f"ship {name}", severity="error", timeout=8)
            return

        def confirmed(ok: bool | None) -> None:
            if ok:
                from pilothouse.core.commands.ship import ship_job

                self.call_core(f"ship {name}", lambda: ship_job(layout, name), done=lambda done: done[1])

        app.push_screen(ConfirmModal(f"ship · {name}", f"Put job {name}'s accepted work onto {base}?\n"
                                     f"{base} fast-forwards to it (one merge commit if {base} moved on). Your "
                                     "checkout changes only by that fast-forward, and not at all when its "
                                     "uncommitted changes touch the same files.", "Ship"), confirmed)

    def action_usage(self) -> None:
        from pilothouse.tui.screens.usage import UsageScreen

        app = self._app()
        if app.layout is not None:
            app.push_screen(UsageScreen(app.dashboard.selected_job))

    def action_timeline(self) -> None:
        from pilothouse.tui.screens.timeline import TimelineScreen

        app = self._app()
        job = app.dashboard.selected_job
        if app.layout is not None and job is not None:
            app.push_screen(TimelineScreen(job))

    def action_settings(self) -> None:
        from pilothouse.tui.screens.settings import SettingsScreen

        if self._app().layout is not None and not self.refuse_unset("settings"):
            self._app().push_screen(SettingsScreen())

    # --- workers and the supervisor -------------------------------------------------------------

    def action_abort_run(self) -> None:
        from pilothouse.tui.screens.modals import ConfirmModal

        app = self._app()
        task = app.dashboard.current_task
        if task is None or not task.run_id:
            return
        run_id = task.run_id

        def confirmed(ok: bool | None) -> None:
            if ok:
                from pilothouse.core.supervisor import control as supervisor_ctl

                self.call_core(f"abort {task.task}", lambda: supervisor_ctl.abort_run(app.layout, run_id),
                               done=lambda ok: f"{run_id} aborted" if ok else f"{run_id} was not running")

        app.push_screen(ConfirmModal(f"abort · {task.task}", f"Abort worker {run_id} ({task.worker})?\n"
                                     "It is asked to stop, then killed if it does not.", "Abort"), confirmed)

    def action_supervisor(self) -> None:
        from pilothouse.tui.screens.modals import ConfirmModal

        app = self._app()
        layout = app.layout
        if layout is None:
            return
        from pilothouse.core.supervisor import control as supervisor_ctl

        if not app.supervisor_alive():
            if self.refuse_unset("supervisor"):
                return

            def start() -> int:
                from pilothouse.core.records.project import load_project

                # as `pilothouse job start` does: a broken project.yaml, or no bubblewrap, is said here
                supervisor_ctl.refuse_unconfined(load_project(layout))
                return supervisor_ctl.start(layout)

            def started(pid: int) -> str:
                app.call_from_thread(app.refresh_supervisor_now)
                return f"supervisor started (pid {pid})"

            self.call_core("supervisor", start, done=started)
            return

        def confirmed(ok: bool | None) -> None:
            if ok:
                self.call_core("supervisor", lambda: supervisor_ctl.stop(layout), done="supervisor stopping")

        app.push_screen(ConfirmModal("supervisor", "Stop the supervisor? Running workers keep running and "
                                     "are adopted when it starts again.", "Stop"), confirmed)
