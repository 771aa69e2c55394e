"""SVG snapshots of the cockpit at 80x24 and 120x40, from deterministic state and a frozen clock.

Regenerate after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


def detail_of(wait_for, *keys: str):
    """Keys that open a run detail, then a wait for its gate, review and diff stat (read in a worker)."""

    async def run_before(pilot) -> None:
        await pilot.pause()
        await pilot.press(*keys)
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "side_loaded", False))

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_dashboard(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_run_detail(snap_compare, cockpit_repo, make_app, wait_for, size) -> None:
    # 3: the Tasks panel; j: calendar-api (running); enter: its run
    assert snap_compare(make_app(cockpit_repo), run_before=detail_of(wait_for, "3", "j", "enter"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_problem_dialog(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["4", "enter"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_hint_words_dialog(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["4", "h", *"add the 7th column"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["question_mark"], terminal_size=size)


def test_run_detail_of_a_task_stopped_by_its_gate(snap_compare, cockpit_repo, make_app, wait_for) -> None:
    # 3: the Tasks panel; j j: calendar-ui (stopped: the fast gate failed twice); enter: its run
    assert snap_compare(make_app(cockpit_repo), run_before=detail_of(wait_for, "3", "j", "j", "enter"),
                        terminal_size=(120, 40))


def test_run_detail_with_review_findings(snap_compare, cockpit_repo, make_app, wait_for) -> None:
    # 3: the Tasks panel; enter: calendar-store (done, reviewed with CHANGES)
    assert snap_compare(make_app(cockpit_repo), run_before=detail_of(wait_for, "3", "enter"), terminal_size=(120, 40))


@pytest.fixture
def branch_of_store(cockpit_repo, monkeypatch):
    """calendar-store's merged branch, made with fixed dates so its commits (and the snapshots) are the same
    every run: what its run detail's diff stat and the diff screen show."""
    import json

    from pilothouse.core.state.store import connect
    from support import git

    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(var, "2026-11-29T07:00:00Z")
    root = cockpit_repo.root
    (root / "src").mkdir()
    (root / "src" / "store.py").write_text('"""Calendar events, kept in a JSON file."""\n\nEVENTS = []\n')
    git(root, "add", "src")
    git(root, "commit", "-qm", "base")
    base = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-qb", "ph/first-draft/calendar-store")
    (root / "src" / "store.py").write_text('"""Calendar events, kept in a JSON file."""\n\nimport json\n\n\n'
                                           'def load(path):\n    return json.load(open(path))\n')
    (root / "tests").mkdir()
    (root / "tests" / "test_store.py").write_text("from src.store import load\n\n\ndef test_load(tmp_path):\n"
                                                  "    (tmp_path / 'e.json').write_text('[]')\n"
                                                  "    assert load(tmp_path / 'e.json') == []\n")
    git(root, "add", "src", "tests")  # never .ai/: leaving the branch would take the store with it
    git(root, "commit", "-qm", "calendar-store: the store")
    git(root, "checkout", "-q", "-")
    db = connect(cockpit_repo.state_db)
    db.execute("UPDATE tasks SET branch='ph/first-draft/calendar-store', counters=? WHERE task='calendar-store'",
               (json.dumps({"base": base}),))
    db.close()
    return cockpit_repo


@pytest.mark.parametrize("size", SIZES)
def test_run_detail_with_gate_review_and_diff(snap_compare, branch_of_store, make_app, wait_for, size) -> None:
    # 3: the Tasks panel; enter: calendar-store (gate passed, reviewed with CHANGES, a branch with two files)
    assert snap_compare(make_app(branch_of_store), run_before=detail_of(wait_for, "3", "enter"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_diff(snap_compare, branch_of_store, make_app, size) -> None:
    # 3: the Tasks panel; D: calendar-store's change against its base, the first file shown
    assert snap_compare(make_app(branch_of_store), press=["3", "D"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_gate_log(snap_compare, cockpit_repo, make_app, wait_for, size) -> None:
    # 4: the Problems panel (KTRWMB, calendar-ui's failed gate); G: its gate output; /: search "assert"
    async def run_before(pilot) -> None:
        await pilot.pause()
        await pilot.press("4", "G")
        await wait_for(pilot, lambda: type(pilot.app.screen).__name__ == "GateLog")  # read in a worker
        await pilot.press("slash", *"assert", "enter")

    assert snap_compare(make_app(cockpit_repo), run_before=run_before, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_usage(snap_compare, cockpit_repo, make_app, size) -> None:
    # $: tokens and money per provider, job (its budget) and task of the selected job; a priced run beside the sim
    from pilothouse.core.state.store import connect

    cockpit_repo.project_yaml.write_text(cockpit_repo.project_yaml.read_text() + "budgets:\n  job_tokens: 100000\n")
    db = connect(cockpit_repo.state_db)
    db.execute("INSERT INTO runs (run_id, job, task, role, provider, model, mode, attempt, state, tokens, cost_usd, "
               "started_at, finished_at) VALUES ('r-claude', 'first-draft', 'calendar-api', 'reviewer', 'claude', "
               "'sonnet', 'review', 1, 'finished', 50000, 1.25, '2026-11-29T07:29:00.000Z', '2026-11-29T07:29:30.000Z')")
    db.close()
    assert snap_compare(make_app(cockpit_repo), press=["dollar_sign"], terminal_size=size)


def timeline_of(wait_for, *keys: str):
    """T on the demo job, a wait for its log to be folded (in a worker), then `keys`."""

    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.dashboard.selected_job == "demo")
        await pilot.press("T")
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        await pilot.press(*keys)

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_timeline_by_slot(snap_compare, demo_repo, make_app, wait_for, size) -> None:
    # l: from the planner's bar to the first builder's, whose tokens and cost the line below says
    assert snap_compare(make_app(demo_repo), run_before=timeline_of(wait_for, "l"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_timeline_by_task(snap_compare, demo_repo, make_app, wait_for, size) -> None:
    # b: a lane per task; j j j l l l l: add-titlecase's second review, then its merge (a mark on the line below)
    assert snap_compare(make_app(demo_repo), run_before=timeline_of(wait_for, "b", "j", "j", "j", *"llllllll"),
                        terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_settings(snap_compare, cockpit_repo, make_app, size) -> None:
    # C: every choice of .ai/project.yaml (dim: a default the file leaves) and when a change applies
    assert snap_compare(make_app(cockpit_repo), press=["C"], terminal_size=size)


def _cockpit_file(text: str) -> None:
    from pilothouse.tui.config import config_file

    config_file().parent.mkdir(parents=True, exist_ok=True)
    config_file().write_text(text)


@pytest.mark.parametrize("theme", ["textual-light", "nord"])
@pytest.mark.parametrize("size", SIZES)
def test_dashboard_under_a_theme_with_the_cursor_on_a_stopped_task(snap_compare, cockpit_repo, make_app, theme,
                                                                   size) -> None:
    # the theme from the operator's cockpit.yaml; 3 j j: the cursor on calendar-ui (stopped: red on every theme)
    _cockpit_file(f"theme: {theme}\n")
    assert snap_compare(make_app(cockpit_repo), press=["3", "j", "j"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_help_shows_the_operators_keys(snap_compare, cockpit_repo, make_app, size) -> None:
    # cockpit.yaml remaps the help to f1 and retry to R: f1 opens the help, which lists them
    _cockpit_file("keys:\n  app.help: f1\n  problem.retry: R\n")
    assert snap_compare(make_app(cockpit_repo), press=["f1"], terminal_size=size)


def typed_into(wait_for_input, screen: str, *keys: str, then: tuple[str, ...] = ()):
    """Keys that open a dialog, its input waited for (typed too early they would land on the dashboard),
    then the keys typed into it."""

    async def run_before(pilot) -> None:
        await pilot.pause()
        await pilot.press(*keys)
        await wait_for_input(pilot, screen)
        await pilot.press(*then)

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_new_job_form(snap_compare, cockpit_repo, make_app, wait_for_input, size) -> None:
    # n: the form, a name and the start of a request typed; ctrl+s and esc in its footer
    keys = typed_into(wait_for_input, "JobForm", "n", then=(*"add-export", "tab", *"Export the month as iCal."))
    assert snap_compare(make_app(cockpit_repo), run_before=keys, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_correct_job_form(snap_compare, cockpit_repo, make_app, wait_for_input, monkeypatch, size) -> None:
    # e: first-draft's request to correct, as its record says it
    from cockpit_support import ts
    from pilothouse.core.records import jobs
    from pilothouse.core.state import events

    for module in (jobs, events):  # the record and its event at the fixture's time, not now
        monkeypatch.setattr(module, "utc_now_iso", lambda: ts(29.8))
    jobs.create_job(cockpit_repo, "first-draft", "A calendar: a JSON store, an HTTP API and a month view.")
    assert snap_compare(make_app(cockpit_repo), run_before=typed_into(wait_for_input, "JobForm", "e"),
                        terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_discard_typed_job(snap_compare, cockpit_repo, make_app, wait_for_input, size) -> None:
    # esc on a form with words in it asks first
    keys = typed_into(wait_for_input, "JobForm", "n", then=(*"add-export", "escape"))
    assert snap_compare(make_app(cockpit_repo), run_before=keys, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_skip_confirm(snap_compare, cockpit_repo, make_app, size) -> None:
    # 4: Problems (KTRWMB on calendar-ui); s: skip lists the tasks it cancels (calendar-docs needs calendar-ui)
    assert snap_compare(make_app(cockpit_repo), press=["4", "s"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_abort_confirm(snap_compare, cockpit_repo, make_app, size) -> None:
    # 3: Tasks; j: calendar-api (running); x: abort its worker?
    assert snap_compare(make_app(cockpit_repo), press=["3", "j", "x"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_ship_confirm(snap_compare, cockpit_repo, make_app, size) -> None:
    # 1: Jobs; k: hello-world (accepted); P: ship it onto main?
    assert snap_compare(make_app(cockpit_repo), press=["1", "k", "P"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_edit_file_picker(snap_compare, ui_worktree, cockpit_repo, make_app, size) -> None:
    # 3: Tasks; j j: calendar-ui (its worktree changed src/ui.py); E: which file to edit
    assert snap_compare(make_app(cockpit_repo), press=["3", "j", "j", "E"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_repo_picker(snap_compare, cockpit_repo, make_app, wait_for_input, size) -> None:
    # `pilothouse view` with several registered repositories and none given
    from pilothouse.core.records.layout import RepoLayout
    from support import git

    notes = cockpit_repo.root.parent / "notes"
    notes.mkdir()
    git(notes, "init", "-q")
    app = make_app(None, repos=[cockpit_repo, RepoLayout(notes)])

    async def run_before(pilot) -> None:
        # the picker comes once the dashboard's panels exist: on a busy machine, after the first frame
        await wait_for_input(pilot, "RepoPicker")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_accept_weakened_confirm(snap_compare, weakened_problems, ui_worktree, make_app, size) -> None:
    # 4: Problems; WKUIQM (calendar-ui's weakened gate) under the cursor; a: merge it? names the tests and files
    async def run_before(pilot) -> None:
        await pilot.pause()
        await pilot.press("4")
        pilot.app.dashboard.problems.select_key("WKUIQM")
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()

    assert snap_compare(make_app(weakened_problems), run_before=run_before, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_with_problems_told_apart(snap_compare, weakened_problems, make_app, size) -> None:
    # four open problems, two of them weakened gates whose summaries start alike: each row leads with what
    # tells it apart (the files and counts, the failing test, the budget), and the panels share the height
    assert snap_compare(make_app(weakened_problems), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_setting_refused_keeps_what_was_typed(snap_compare, cockpit_repo, make_app, wait_for_input, size) -> None:
    # C, enter on max_workers: one line, the cursor after the value; "lots" + Enter: core's one-line
    # refusal under what was typed, the dialog still open
    async def run_before(pilot) -> None:
        await pilot.pause()
        await pilot.press("C")
        await wait_for_input(pilot, "SettingsScreen")
        pilot.app.screen.query_one("#settings-table").select_key("max_workers")
        await pilot.press("enter")
        await wait_for_input(pilot, "ValueModal")
        await pilot.press("ctrl+u", *"lots", "enter")
        await pilot.pause()

    assert snap_compare(make_app(cockpit_repo), run_before=run_before, terminal_size=size)
