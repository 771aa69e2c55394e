"""What the operator's keys do, through the real app, core and a real state.db."""

from __future__ import annotations

import pytest
from cockpit_support import shown
from pilothouse.core.records.layout import RepoLayout
from test_cockpit import replies

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("panel", ["1", "2", "5"])
async def test_reply_keys_ignore_problems_of_an_unfocused_panel(cockpit_repo, make_app, panel) -> None:
    from pilothouse.tui.screens.modals import ConfirmModal

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.dashboard.problems.current is not None  # KTRWMB is highlighted in Problems
        await pilot.press(panel, "r", "a")  # Jobs (first-draft has no job-level problem), Providers, Events
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)
        await pilot.press("s")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        await pilot.press("4", "r")  # in Problems the same key answers the highlighted row
        await pilot.pause(0.3)
        assert [r["reply"] for r in replies(cockpit_repo)] == ["retry"]


async def test_accepting_a_thrice_rejected_commit_asks_first(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops import problems
    from pilothouse.tui.screens.modals import ConfirmModal

    rejected = problems.open_problem(cockpit_repo, "first-draft", "calendar-store", "review_rejected",
                                     "The reviewer rejected the change 3 times: the file handle leaks.")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        app.dashboard.problems.select_key(rejected.code)
        await pilot.pause()
        assert app.dashboard.current_problem.code == rejected.code
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert "rejected" in str(app.screen.body)
        await pilot.press("n")
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert [(r["code"], r["reply"]) for r in replies(cockpit_repo)] == [(rejected.code, "accept")]


WEAKENED = {"level": "fast", "weakened": [
    {"kind": "assertions_removed", "path": "tests/test_ui.py", "detail": "3 assertion line(s) fewer"},
    {"kind": "test_deleted", "path": "tests/test_month.py", "detail": "deleted"}]}


@pytest.mark.parametrize("kind", ["gate_weakened", "unchanged_resubmission"])
async def test_accept_that_merges_asks_first_naming_what_merges_and_enter_means_no(
        cockpit_repo, ui_worktree, make_app, wait_for, kind) -> None:
    """`a` on weakened or unchanged work, from the Problems panel and from the problem dialog: one line
    names the weakened tests and the files that merge; Enter (and n) send nothing, only y does."""
    from pilothouse.core.stops import problems
    from pilothouse.tui.screens.modals import ConfirmModal
    from pilothouse.tui.screens.problem import ProblemDialog

    opened = problems.open_problem(cockpit_repo, "first-draft", "calendar-ui", kind, "The gate passed, but...",
                                   WEAKENED if kind == "gate_weakened" else {}, ["hint", "accept", "skip", "plan"])
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        app.dashboard.problems.select_key(opened.code)
        await pilot.pause()
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.body)
        assert "\n" not in body and "src/ui.py +1 -1" in body and "1 file" in body
        if kind == "gate_weakened":
            assert "tests/test_ui.py: 3 assertion line(s) fewer" in body
            assert "tests/test_month.py: test file deleted" in body
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmModal) and not replies(cockpit_repo)
        await pilot.press("enter")  # the problem dialog: the same reply asks the same question
        await wait_for(pilot, lambda: isinstance(app.screen, ProblemDialog))
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert str(app.screen.body) == body
        await pilot.press("n")
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert [(r["code"], r["reply"]) for r in replies(cockpit_repo)] == [(opened.code, "accept")]


async def test_skip_says_in_one_line_which_tasks_it_cancels(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.tui.screens.modals import ConfirmModal

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        app.dashboard.problems.select_key("KTRWMB")
        await pilot.pause()
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = str(app.screen.body)
        assert "\n" not in body and "cancels calendar-ui, calendar-docs" in body
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)


async def test_abort_is_offered_in_the_footer_on_a_running_task(cockpit_repo, make_app) -> None:
    from textual.widgets._footer import FooterKey

    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j")  # calendar-api: running
        await pilot.pause(0.3)
        assert app.dashboard.current_task.task == "calendar-api"
        keys = {k.key_display or k.key for k in app.screen.query(FooterKey)}
        assert "x" in keys
        await pilot.press("j")  # calendar-ui: stopped, nothing to abort
        await pilot.pause(0.3)
        assert "x" not in {k.key_display or k.key for k in app.screen.query(FooterKey)}


async def test_ship_an_accepted_job_asks_then_refuses_over_uncommitted_changes_then_ships(tmp_path, wait_for) -> None:
    """P on an accepted job: a confirmation, core's one-line refusal while the operator's checkout has
    uncommitted changes in a file the work changes, then one commit for the job on the base branch;
    P is not offered once it shipped."""
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.modals import ConfirmModal
    from support import git
    from test_panels import OVER_BUDGET, accepted_sim_job

    layout = accepted_sim_job(tmp_path, OVER_BUDGET.replace("usage: {input: 4000, output: 900}", ""))
    root = layout.root
    head, main = git(root, "rev-parse", "pilothouse/integration/demo"), git(root, "rev-parse", "main")
    assert head != main
    (root / "one.txt").write_text("the operator's own draft\n")  # uncommitted, in the file the job adds
    app = CockpitApp(layout, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.selected_job == "demo")
        await pilot.press("1", "P")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert "onto main" in str(app.screen.body)
        await pilot.press("y")
        await wait_for(pilot, lambda: app._notifications)
        refusal = next(iter(app._notifications)).message
        assert "uncommitted changes in one.txt" in refusal and "\n" not in refusal
        assert git(root, "rev-parse", "main") == main
        app.clear_notifications()
        (root / "one.txt").unlink()
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await wait_for(pilot, lambda: app._notifications)
        assert next(iter(app._notifications)).message.startswith("shipped job demo onto main")
        # one commit for the job, holding the tree the job's gate passed
        assert git(root, "rev-parse", "main~1") == main
        assert git(root, "rev-parse", "main^{tree}") == git(root, "rev-parse", f"{head}^{{tree}}")
        assert (root / "one.txt").read_text() == "one\n"  # the checkout fast-forwarded with it
        # the job's row says shipped, and P is no longer offered for it
        await wait_for(pilot, lambda: app.dashboard.jobs.jobs["demo"].state == "shipped")
        assert app.check_action("ship", ()) is False


async def test_unset_repository_refuses_start_and_new_job(git_repo, make_app, wait_for) -> None:
    layout = RepoLayout(git_repo)  # no .ai/project.yaml
    app = make_app(layout)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "pilothouse init" in app.status_line().plain
        await pilot.press("S")
        await wait_for(pilot, lambda: app._notifications)
        message = next(iter(app._notifications)).message
        assert "no .ai/project.yaml" in message and "pilothouse init" in message
        assert "started" not in " ".join(n.message for n in app._notifications)
        app.clear_notifications()
        await pilot.press("n")
        await wait_for(pilot, lambda: app._notifications)
        assert "pilothouse init" in next(iter(app._notifications)).message
        assert app.screen is app.dashboard  # no form to fill in for nothing
        assert not layout.jobs_dir.exists() or not any(layout.jobs_dir.iterdir())


async def test_reply_keys_follow_the_selected_task(cockpit_repo, make_app) -> None:
    from pilothouse.tui.screens.modals import ConfirmModal

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("3")  # Tasks; calendar-store (no problem) selected
        await pilot.pause()
        assert app.dashboard.current_task.task == "calendar-store"
        assert app.dashboard.problems.current.task == "calendar-ui"  # the Problems row is another task's
        assert not shown(app, "problem.retry") and not shown(app, "problem.skip")
        await pilot.press("s")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmModal)
        await pilot.press("r")
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)
        await pilot.press("j", "j")  # calendar-ui: its own problem KTRWMB
        await pilot.pause()
        assert app.dashboard.current_task.task == "calendar-ui"
        assert shown(app, "problem.retry")
