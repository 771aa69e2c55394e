"""Defects a tester found in the cockpit, each driven through the real app against real state."""

from __future__ import annotations

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from test_cockpit import replies

pytestmark = pytest.mark.anyio


def shown(app: object, binding_id: str) -> bool:
    """Whether the footer offers the binding (check_action said yes)."""
    return any(b.binding.id == binding_id and b.enabled
               for b in app.screen.active_bindings.values())  # type: ignore[attr-defined]


# --- 1. registered repositories: listed by name and path, opened by name ----------------------------


async def test_registered_repos_are_listed_and_opened(isolated_home, tmp_path, monkeypatch) -> None:
    from pilothouse.core.commands.view import resolve
    from pilothouse.core.records import repos
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.picker import RepoPicker
    from textual.widgets import OptionList

    alpha, budget = tmp_path / "work" / "alpha", tmp_path / "work" / "budget"
    for path in (alpha, budget):
        path.mkdir(parents=True)
        repos.register_repo(path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)

    layout, choices = resolve(None)
    assert layout is None
    assert [c.root for c in choices] == [alpha.resolve(), budget.resolve()]
    named, _ = resolve("budget")  # `pilothouse view budget`
    assert named.root == budget.resolve()

    app = CockpitApp(None, choices, live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RepoPicker)
        options = app.screen.query_one(OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert "alpha" in prompts[0] and "budget" in prompts[1] and str(budget.name) in prompts[1]
        assert all(not p.startswith("/") for p in prompts)
        await pilot.press("j", "enter")
        await pilot.pause()
        assert app.layout is not None and app.layout.root == budget.resolve()
        assert "budget" in app.status_line().plain


# --- 2. a repository that was never set up: S and n say to run init ----------------------------------


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


# --- 3. reply keys act only on the selected task's own problem -----------------------------------


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


# --- 4. an answer the stopped supervisor has not taken yet ----------------------------------------


async def test_answer_while_supervisor_stopped_shows_as_waiting(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.supervisor_alive()
        await pilot.press("4", "r")
        table = app.dashboard.problems
        await wait_for(pilot, lambda: "waiting for the supervisor" in str(table.get_cell("KTRWMB", "what")))
        assert "waiting for the supervisor" in str(table.get_cell("KTRWMB", "what"))
        assert "(stopped)" in str(table.get_cell("KTRWMB", "what"))
        assert str(table.get_cell("KTRWMB", "replies")) == "✓ retry · S starts it"
        await wait_for(pilot, lambda: any("supervisor is stopped" in n.message for n in app._notifications))
        await pilot.pause()
        assert not any(shown(app, f"problem.{r}") for r in ("retry", "accept", "skip", "hint"))
        assert "problem waiting" not in app.status_line().plain
        await pilot.press("a", "enter")  # neither a second reply nor a dialog with keys
        await pilot.pause(0.3)
        assert len(replies(cockpit_repo)) == 1
        assert "answered (retry)" in app.screen.answered_note


# --- 5. the new-job form keeps what was typed ------------------------------------------------------


async def test_job_form_validates_in_place_and_asks_before_discarding(cockpit_repo, make_app, wait_for,
                                                                      wait_for_input) -> None:
    from pilothouse.core.records import jobs

    jobs.create_job(cockpit_repo, "week-view", "Show a week view.")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        form = app.screen
        await pilot.press(*"week-view", "tab", *"A second week view.", "ctrl+s")
        await wait_for(pilot, lambda: app.screen is not form or getattr(form, "error", ""))
        assert app.screen is form  # still open, nothing lost
        assert "week-view" in form.error and "\n" not in form.error
        assert form.query_one("#request").text == "A second week view."
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
        await pilot.press("enter")  # the safe default: keep the form
        await pilot.pause()
        assert app.screen is form
        await pilot.press("escape", "y")
        await pilot.pause()
        assert app.screen is app.dashboard
        assert jobs.load_job(cockpit_repo, "week-view").request == "Show a week view."
        # an empty form closes at once
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard


# --- 6. a problem dialog answered elsewhere -------------------------------------------------------


async def test_problem_dialog_answered_elsewhere_drops_its_keys(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops import problems
    from pilothouse.tui.screens.problem import ProblemDialog

    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProblemDialog))
        dialog = app.screen
        assert shown(app, "dialog.retry")
        problems.act(cockpit_repo, "KTRWMB", "accept", who="someone@cli")
        await wait_for(pilot, lambda: not shown(app, "dialog.retry"))
        assert dialog.answered == "accept"
        assert "answered (accept) elsewhere" in str(dialog.query_one("#dialog-keys").render())
        assert not shown(app, "dialog.retry")
        await pilot.press("r")
        await pilot.pause(0.3)
        assert len(replies(cockpit_repo)) == 1 and not app._notifications


# --- 7. the filter at 80x24 ------------------------------------------------------------------------


async def test_filter_escape_restores_layout_and_follow(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        dash = app.dashboard
        for keys in (("5", "slash", "escape"), ("3", "slash", "escape")):
            await pilot.press(*keys)
            await pilot.pause()
            await pilot.pause()
            assert not dash.show_vertical_scrollbar
            assert [p.outer_size.width for p in (dash.jobs, dash.tasks, dash.problems, dash.events)] == [80] * 4
        events = dash.events
        EventLog(cockpit_repo.events).append("merge.finished", job="first-draft", task="calendar-api",
                                             data={"sha": "feedbeef"})
        await wait_for(pilot, lambda: "feedbeef" in events.lines[-1])
        await pilot.pause()
        assert events.follow and events.scroll_y == events.max_scroll_y
