"""Fixing in place (tui/fix.py): a shell in the task's worktree, the editor, the diff, the gate output —
on a real sim job and on worktrees whose content is hostile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.state.store import connect
from support import git

pytestmark = pytest.mark.anyio

FIX = '''#!/bin/sh
# the operator's shell, scripted: fold the accents the gate's test expects
cat > textkit/slugify.py <<'PY'
"""URL-safe slugs."""
import unicodedata


def slugify(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return "-".join(folded.lower().split())
PY
echo "$PWD" > "$PILOTHOUSE_WORKTREE/../shell-ran-in"
'''


def _job_state(layout: RepoLayout) -> str | None:
    db = connect(layout.state_db, readonly=True)
    try:
        row = db.execute("SELECT state FROM jobs_state WHERE job='demo'").fetchone()
        return row[0] if row else None
    finally:
        db.close()


async def test_shell_fix_retry_merges_a_job_whose_gate_failed(tmp_path, cli, monkeypatch, wait_for) -> None:
    """The loop: the gate fails twice, the operator opens a shell in the worktree (a scripted $SHELL),
    fixes the file, answers the retry the cockpit offers on the way back, and the job is merged."""
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.modals import ConfirmModal

    root = tmp_path / "scratch"
    out = cli("demo", "--follow", "--dir", str(root), "--scenario", "gate-fails-twice", timeout=240)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    layout = RepoLayout(root)
    shell = tmp_path / "fix-shell.sh"
    shell.write_text(FIX)
    shell.chmod(0o755)
    monkeypatch.setenv("SHELL", str(shell))
    try:
        app = CockpitApp(layout, live=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.dashboard.problems.problems, timeout=60)
            problem = next(iter(app.dashboard.problems.problems.values()))
            assert problem.kind == "gate_failed" and problem.task == "add-slugify"
            await pilot.press("3")  # Tasks: add-slugify, stopped on it
            await wait_for(pilot, lambda: app.dashboard.current_task is not None
                           and app.dashboard.current_task.task == "add-slugify")
            worktree = Path(app.dashboard.current_task.worktree)
            await pilot.press("exclamation_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), timeout=60)
            assert (worktree.parent / "shell-ran-in").read_text().strip() == str(worktree)
            assert "1 file changed, not committed" in str(app.screen.body)
            await pilot.press("y")
            await wait_for(pilot, lambda: _job_state(layout) == "accepted", timeout=240)
            await wait_for(pilot, lambda: str(app.dashboard.jobs.get_cell("demo", "state")) == "accepted")
        from pilothouse.core.git.gates import gate_log

        assert "4 passed" in gate_log(layout.runtime, "demo", "add-slugify", "fast").read_text()  # kept whole
        merged = git(root, "show", "pilothouse/integration/demo:textkit/slugify.py")
        assert "unicodedata" in merged  # the operator's fix is what merged
        answered = [json.loads(x) for x in layout.events.read_text().splitlines() if '"problem.answered"' in x]
        assert [(e["data"]["code"], e["data"]["reply"]) for e in answered] == [(problem.code, "retry")]
    finally:
        cli("job", "stop", "--repo", str(root), timeout=60)


HOSTILE = "title = '[bold red]not markup[/]'\x1b]0;pwned\x07\x1b[2J\n"


@pytest.fixture
def hostile_task(ui_worktree: Path, tmp_path: Path) -> Path:
    """calendar-ui's worktree carries markup, escape sequences and a link to a file outside."""
    wt = ui_worktree
    (wt / "src" / "ui.py").write_text("columns = 7\n" + HOSTILE)
    secret = tmp_path / "operators-secret.txt"
    secret.write_text("the operator's own file\n")
    (wt / "src" / "link.py").symlink_to(secret)
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "work")
    return wt


def gate_log_drawn(app) -> bool:
    """The gate log is in front and its lines are written (under load, the screen is pushed a
    moment before its log is mounted and filled)."""
    return type(app.screen).__name__ == "GateLog" and any(log.lines for log in app.screen.query("#gatelog-text"))


def _drawn(log) -> str:
    return "\n".join(line.text for line in log.lines)


async def test_diff_shows_hostile_content_as_text_and_never_follows_a_link(hostile_task, cockpit_repo,
                                                                           make_app, wait_for) -> None:
    from textual.widgets import RichLog

    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j")  # calendar-ui
        await pilot.pause()
        await pilot.press("D")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "DiffScreen")
        screen = app.screen
        assert [f.path for f in screen.files] == ["src/link.py", "src/ui.py"]
        log = screen.query_one("#diff-text", RichLog)
        await pilot.press("right_square_bracket")  # the next file: src/ui.py
        await pilot.pause()
        text = _drawn(log)
        assert "+columns = 7" in text and "-columns = 6" in text
        assert "[bold red]not markup[/]" in text  # drawn as written, not as a style
        assert "\x1b" not in text and "\x07" not in text and "pwned" not in text  # the title it would set, gone with it
        await pilot.press("left_square_bracket")
        await pilot.pause()
        link = _drawn(log)
        assert "operators-secret.txt" in link and "the operator's own file" not in link  # the name, not the file


async def test_editor_refuses_a_link_out_of_the_worktree(hostile_task, cockpit_repo, make_app, wait_for,
                                                          monkeypatch, tmp_path) -> None:
    opened = tmp_path / "opened"
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "E")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "PickModal")
        assert app.screen.choices == ["src/link.py", "src/ui.py"]
        await pilot.press("enter")  # src/link.py: a link to the operator's file
        await wait_for(pilot, lambda: app._notifications)
        assert "is a link" in next(iter(app._notifications)).message
        assert not opened.exists()
        await pilot.press("E")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "PickModal" and app.focused is not None
                       and app.focused.screen is app.screen)
        await pilot.press("j", "enter")  # src/ui.py
        await wait_for(pilot, lambda: opened.exists())
        assert opened.read_text().split() == ["src/ui.py"]


async def test_gate_log_lists_every_run_searchable_and_printable(hostile_task, cockpit_repo, make_app,
                                                                  wait_for) -> None:
    from textual.widgets import RichLog

    EventLog(cockpit_repo.events).append("gate.finished", job="first-draft", task="calendar-ui", data={
        "level": "fast", "passed": False, "exit_code": 1, "command": "python -m pytest -q", "duration_s": 2.5,
        "counts": {"collected": 2, "passed": 1, "failed": 1},
        "output_tail": "collected 2\n\x1b[31mE   assert 6 == 7\x1b[0m\n[red]1 failed[/red], 1 passed"})
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "G")
        await wait_for(pilot, lambda: gate_log_drawn(app))
        log = app.screen.query_one("#gatelog-text", RichLog)
        text = _drawn(log)
        assert text.count("── ") == 2  # both runs of the gate, oldest first
        # each run's record: exit code, time, counts (passed, failed and skipped, a 0 too)
        assert "failed (exit 1) 2.5s 2 tests: 1 passed, 1 failed, 0 skipped" in text
        assert "E   assert 6 == 7" in text and "\x1b" not in text and "[red]1 failed[/red]" in text
        await pilot.press("slash", *"assert")
        await pilot.pause()
        assert app.screen.matches == [3, 8]  # the FAILED line of the first run, the E line of the second
        await pilot.press("enter", "n")
        await pilot.pause()
        assert app.screen.at == 1
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "Dashboard"


async def test_gate_log_shows_the_whole_kept_output_never_through_a_link(cockpit_repo, make_app, wait_for,
                                                                         tmp_path) -> None:
    from pilothouse.core.git.gates import gate_log
    from textual.widgets import RichLog

    kept = gate_log(cockpit_repo.runtime, "first-draft", "calendar-ui", "fast")
    kept.parent.mkdir(parents=True)
    kept.write_text("".join(f"collecting line-{n}\n" for n in range(1, 2001)) + "FAILED the whole story\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "G")  # KTRWMB: calendar-ui's failed gate
        await wait_for(pilot, lambda: gate_log_drawn(app))
        text = _drawn(app.screen.query_one("#gatelog-text", RichLog))
        assert "collecting line-1\n" in text and "FAILED the whole story" in text and "its whole output" in text
        await pilot.press("escape")
    kept.unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text("the operator's own secret\n")
    kept.symlink_to(secret)  # a link where the log should be is not followed
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4", "G")
        await wait_for(pilot, lambda: gate_log_drawn(app))
        text = _drawn(app.screen.query_one("#gatelog-text", RichLog))
        assert "secret" not in text and "FAILED tests/test_ui.py::test_month" in text  # the event's tail


async def test_gate_log_finds_the_gate_however_much_the_log_grew_since(cockpit_repo, make_app, wait_for) -> None:
    """calendar-ui's gate lies 10 MB back in events.jsonl: read through the event index, not the log's tail."""
    from cockpit_support import bury
    from textual.widgets import RichLog

    bury(cockpit_repo)
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "G")  # calendar-ui (no problem in focus: only the log can tell)
        await wait_for(pilot, lambda: gate_log_drawn(app))
        text = _drawn(app.screen.query_one("#gatelog-text", RichLog))
        assert "fast failed" in text and "assert 6 == 7" in text


async def test_gate_log_scrolls_with_j_and_k(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.git.gates import gate_log
    from textual.widgets import RichLog

    kept = gate_log(cockpit_repo.runtime, "first-draft", "calendar-ui", "fast")
    kept.parent.mkdir(parents=True)
    kept.write_text("".join(f"collecting line-{n}\n" for n in range(1, 201)) + "FAILED the whole story\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "G")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "GateLog")
        log = app.screen.query_one("#gatelog-text", RichLog)
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y > 0)  # opened on the failure, at the end
        bottom = log.scroll_y
        await pilot.press("k", "k", "k")
        await wait_for(pilot, lambda: log.scroll_y == bottom - 3)
        await pilot.press("j")
        await wait_for(pilot, lambda: log.scroll_y == bottom - 2)


async def test_edit_on_a_merged_task_says_why_it_opens_nothing(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("3")  # calendar-store: done, its worktree gone with the merge
        await wait_for(pilot, lambda: app.dashboard.current_task.task == "calendar-store")
        await pilot.press("E")
        await wait_for(pilot, lambda: app._notifications)
        said = next(iter(app._notifications)).message
        assert "calendar-store is merged into pilothouse/integration/first-draft: its worktree was removed" in said
        assert type(app.screen).__name__ == "Dashboard"


async def test_shell_on_a_merged_task_says_where_its_work_is(
        cockpit_repo, make_app, wait_for) -> None:
    from cockpit_support import shown

    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3")
        await wait_for(pilot, lambda: app.dashboard.current_task.task == "calendar-store")
        assert not shown(app, "fix.shell")  # not offered: the task is there, its worktree is not
        await pilot.press("exclamation_mark")
        await wait_for(pilot, lambda: app._notifications)
        said = next(iter(app._notifications)).message
        assert said.startswith("calendar-store is merged into pilothouse/integration/first-draft")
        assert "pilothouse/integration/first-draft holds it" in said
        assert type(app.screen).__name__ == "Dashboard"
