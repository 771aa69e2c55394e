"""The operator's keys (cockpit.yaml `keys:`), through the real app and the real CLI."""

from __future__ import annotations

import json
import re

import pytest
from test_cockpit import replies
from test_events_panel import screen_text

pytestmark = pytest.mark.anyio


def _write(text: str):
    from pilothouse.tui.config import config_file

    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def test_a_remapped_key_acts_and_the_footer_and_help_show_it(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  problem.retry: R\n  app.help: f1\n  supervisor.toggle: ctrl+s\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        status = next(line for line in screen_text(app).splitlines() if " pilothouse " in line).rstrip()
        assert "stopped · ^s starts" in status and status.endswith("│ f1 help")
        footer = screen_text(app).rstrip().splitlines()[-1]
        assert " R Retry" in footer and " r Retry" not in footer and "problem.retry" not in footer
        await pilot.press("r")  # the default key no longer answers
        await pilot.pause()
        assert replies(cockpit_repo) == []
        await pilot.press("f1")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.pause()
        text = screen_text(app)
        assert re.search(r"\bR +run the stopped step again", text) and re.search(r"\bf1 +this help", text)
        assert "problem.retry" not in text and "app.help" not in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")
        await pilot.press("R")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert replies(cockpit_repo)[0]["reply"] == "retry"


async def test_the_problems_replies_column_marks_the_operators_keys(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  problem.retry: R\n  problem.skip: ctrl+k\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#problems-table")
        await wait_for(pilot, lambda: table.row_count)
        cell = table.get_row_at(0)[-1]
        marked = [cell.plain[s.start:s.end] for s in cell.spans if "reverse" in str(s.style)]
        assert marked == ["R", "a", "^k", "h"], cell.plain
        assert "Rretry" not in cell.plain and "^k skip" in cell.plain


async def test_bad_entries_are_one_line_each_and_keep_their_defaults(cockpit_repo, make_app, wait_for) -> None:
    path = _write("# my keys\nkeys:\n  nosuch.binding: z\n  app.help: f99\n  run.abort: j\n  app.quit: Q\n"
                  "theme: no-such-theme\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        lines = [n.message for n in app._notifications]
        assert len(lines) == 4 and all("\n" not in line for line in lines)
        said = "\n".join(lines)
        assert f"{path}:3: 'nosuch.binding' is not a binding id" in said
        assert f"{path}:4: app.help: 'f99' is not a key" in said
        assert f"{path}:5: run.abort: 'j' is already Down (nav.down) in the dashboard: choose another key" in said
        assert f"{path}:7: theme: 'no-such-theme' is not a theme" in said
        assert app.theme == "textual-dark"
        app.clear_notifications()
        await pilot.press("question_mark")  # app.help kept its default
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")
        await pilot.press("q")  # app.quit is Q now (the good entry applies): q does nothing
        await pilot.pause()
        assert app.is_running
        await pilot.press("Q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_the_problem_dialog_lists_the_operators_reply_keys(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  dialog.retry: R\n  dialog.close: x\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ProblemDialog")
        await pilot.pause()
        shown = str(app.screen.query_one("#dialog-keys").render())
        assert " R  retry" in shown and " a  accept" in shown and " x  close" in shown and " r  retry" not in shown
        await pilot.press("x")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")


def test_two_keys_swapped_are_no_clash_and_a_taken_key_is() -> None:
    from pilothouse.tui.app import binding_scopes
    from pilothouse.tui.keymap import Entry, check

    scopes = binding_scopes()
    swapped = [Entry("app.quit", ["x"], 2), Entry("run.abort", ["q"], 3)]
    assert check(swapped, "f", scopes) == ({"app.quit": "x", "run.abort": "q"}, [])
    keymap, problems = check([Entry("app.quit", ["x"], 2)], "f", scopes)
    assert keymap == {} and problems == ["f:2: app.quit: 'x' is already Abort worker (run.abort) in the dashboard: "
                                         "choose another key; its default key stays"]
    # Textual's own keys are taken too: enter selects a table's row
    keymap, problems = check([Entry("job.new", ["enter"], 4)], "f", scopes)
    assert keymap == {} and "is already Select (Textual's own)" in problems[0]
    # the same key on two screens is no clash
    assert check([Entry("diff.next", ["n"], 2)], "f", scopes) == ({"diff.next": "n"}, [])


def test_the_default_keys_have_no_clash() -> None:
    from pilothouse.tui.app import binding_scopes
    from pilothouse.tui.keymap import Entry, bound, check

    scopes = binding_scopes()
    ids = sorted({b.binding.id for b in bound(scopes) if b.binding.id})
    # every id mapped to its own default keys: accepted as they are
    defaults = [Entry(i, sorted({b.key for b in bound(scopes) if b.binding.id == i}), n) for n, i in enumerate(ids)]
    keymap, problems = check(defaults, "f", scopes)
    assert problems == [] and set(keymap) == set(ids)


def test_view_keys_lists_every_binding_id_with_the_operators_key(cli, tmp_path) -> None:
    path = _write("keys:\n  problem.retry: R\n  fix.shell: ctrl+o\n")
    proc = cli("view", "--keys", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows = {r["id"]: r for r in report["keys"]}
    assert report["file"] == str(path) and report["problems"] == []
    assert rows["problem.retry"]["keys"] == ["R"] and rows["problem.retry"]["default"] == ["r"]
    assert rows["fix.shell"]["keys"] == ["^o"] and rows["fix.shell"]["default"] == ["!"]
    assert rows["nav.down"]["scopes"] == ["dashboard", "run detail", "settings", "usage"]
    proc = cli("view", "--keys", cwd=tmp_path)
    assert proc.returncode == 0 and "problem.retry        R              r" in proc.stdout
    _write("keys:\n  problem.retry: [R\n")
    proc = cli("view", "--keys", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"pilothouse: {path}:3: invalid YAML") and len(proc.stderr.splitlines()) == 1


async def test_the_confirm_dialog_names_the_operators_keys(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  confirm.yes: Y\n  confirm.no: x, escape\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "s")  # skip KTRWMB: asks first
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
        assert str(app.screen.query_one(".keys").render()) == "Y Skip   x/esc cancel"
        await pilot.press("x")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")
        assert replies(cockpit_repo) == []


async def test_the_hint_dialog_names_the_operators_keys(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  words.send: ctrl+g\n  words.cancel: f2\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "h")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "WordsModal")
        assert str(app.screen.query_one(".dialog").border_subtitle) == "^g send · f2 cancel"
        await pilot.press("ctrl+g")  # nothing typed yet
        await wait_for(pilot, lambda: app._notifications)
        assert [n.message for n in app._notifications][-1] == "type the words first (f2 cancels)"
        await pilot.press("f2")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")


async def test_an_answered_problem_names_the_operators_start_key(cockpit_repo, make_app, wait_for) -> None:
    _write("keys:\n  supervisor.toggle: ctrl+o\n")
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "r")  # answered; the supervisor is stopped: it waits for its start
        table = app.dashboard.problems
        await wait_for(pilot, lambda: "KTRWMB" in table.pending)
        await wait_for(pilot, lambda: "starts it" in table.get_row("KTRWMB")[-1].plain)
        assert table.get_row("KTRWMB")[-1].plain == "✓ retry · ^o starts it"
