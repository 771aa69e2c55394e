"""Attack 5: a hostile builder's words carry terminal escapes (a window title, a cleared screen, an
8-bit CSI, a DCS query the terminal answers by typing into the operator's shell, tmux's pane title,
a bidi override). Through the real `pilothouse run` on the simulator, its report, `live`, `events`,
`why`, a problem's mail and the MCP fence, none of those bytes comes out: the text shows inert."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import unicodedata
from pathlib import Path

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from support import guard

# every form attack 5 used, and the neighbours a terminal also obeys
HOSTILE = ("title\x1b]0;PWNED-TITLE\x07 clear\x1b[2J\x1b[H csi8\x9b2J "
           "dcs\x1bP$q\"p\x1b\\ xtgettcap\x90+q544e\x9c tmux\x1bkPWNED-PANE\x1b\\ "
           "bidi\u202eexe.txt\u202c osc8\x9d2;PWNED-8BIT\x9c remnant]0;PWNED-REMNANT\x07 end")
MARKERS = ("PWNED", "\x1b", "\x07")


def obeyed(text: str) -> list[str]:
    """The characters of `text` a terminal would act on: C0 but newline and tab, DEL, C1, bidi."""
    return sorted({repr(c) for c in text if (unicodedata.category(c) == "Cc" and c not in "\n\t")
                   or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"})


def assert_inert(text: str, where: str) -> None:
    assert obeyed(text) == [], f"{where}: {obeyed(text)}\n{text!r}"
    assert "PWNED" not in text, f"{where}: a sequence's body was shown\n{text!r}"


def hostile_scenario(tmp_path: Path) -> str:
    say = json.dumps(HOSTILE)  # \u escapes: a YAML double-quoted string reads them back raw
    p = tmp_path / "hostile-text.yaml"
    p.write_text(f"""name: hostile-text
description: a builder whose words and tool calls carry terminal escapes
scripts:
  - match: {{mode: code}}
    turns:
      - say: {say}
        actions:
          - bash: {{command: {json.dumps("true # " + HOSTILE)}, description: {say}}}
      - say: {json.dumps(HOSTILE + chr(10) + '<!--RESULT-->{"status":"complete","files_changed":[],'
                         '"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->')}
""")
    return str(p)


def test_pilothouse_run_shows_a_hostile_builders_escapes_inert(cli, git_repo, tmp_path) -> None:
    task = tmp_path / "task.md"
    task.write_text("Say hello.\n")
    r = cli("run", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--task-file", str(task),
            "--scenario", hostile_scenario(tmp_path), "--run-id", "hostile-text-1", timeout=120)
    assert "report:" in r.stdout, r.stdout + r.stderr
    assert "title" in r.stdout and "end" in r.stdout  # the words are shown, only their escapes are not
    assert_inert(r.stdout, "run stdout")
    assert_inert(r.stderr, "run stderr")
    report = Path(r.stdout.rsplit("report:", 1)[1].strip().splitlines()[0])
    shown = report.read_text()
    assert "csi8" in shown and "<!--RESULT-->" in shown
    assert_inert(shown, "report.md")


def test_pilothouse_run_on_a_terminal_writes_no_escape_byte(git_repo, tmp_path) -> None:
    """The same run with a real terminal (a pty) for stdout and stderr: the bytes the terminal gets."""
    task = tmp_path / "task.md"
    task.write_text("Say hello.\n")
    ours, theirs = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "run", "--provider", "sim", "--mode", "code",
                             "--workdir", str(git_repo), "--task-file", str(task), "--scenario",
                             hostile_scenario(tmp_path), "--run-id", "hostile-text-tty"],
                            stdin=subprocess.DEVNULL, stdout=theirs, stderr=theirs, cwd=tmp_path)
    os.close(theirs)
    got = b""
    while True:
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # EIO: the other end closed, the run is over
            break
        if not chunk:
            break
        got += chunk
    os.close(ours)
    assert proc.wait(timeout=guard(120)) in (0, 1)
    assert b"report:" in got and b"csi8" in got, got
    assert b"\x1b" not in got and b"\x07" not in got and b"\x9b" not in got
    assert_inert(got.decode("utf-8").replace("\r\n", "\n"), "run on a tty")


def test_dispatch_prints_hostile_text_only_escaped(cli, git_repo, tmp_path) -> None:
    task = tmp_path / "task.md"
    task.write_text("Say hello.\n")
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--task-file", str(task),
            "--scenario", hostile_scenario(tmp_path), "--run-id", "hostile-text-2", timeout=120)
    assert r.returncode == 0, r.stderr
    assert_inert(r.stdout, "dispatch stdout")  # JSON: a control character is a \u escape
    assert_inert(r.stderr, "dispatch stderr")
    verdict = json.loads(r.stdout.splitlines()[-1])
    assert_inert(Path(verdict["final_text_path"]).read_text(), "dispatch report.md")


def test_live_events_and_why_show_a_hostile_event_inert(cli, git_repo) -> None:
    layout = RepoLayout(git_repo)
    log = EventLog(layout.events)
    log.append("task.state", job="j", task="a", data={"from": None, "to": "running", "reason": HOSTILE})
    log.append("gate.finished", job="j", task="a", data={"level": "fast", "passed": False, "reason": HOSTILE,
                                                         "output_tail": HOSTILE + "\nFAILED " + HOSTILE})
    log.append("task.state", job="j", task="a", data={"from": "running", "to": "stopped", "reason": HOSTILE})
    for args in (("live", "--last", "-1"), ("events", "--task", "a", "--job", "j"), ("why", "a", "--job", "j")):
        r = cli(*args, cwd=git_repo)
        assert r.returncode == 0 and "csi8" in r.stdout, (args, r.stdout, r.stderr)
        assert_inert(r.stdout, " ".join(args))
        assert_inert(r.stderr, " ".join(args))
    lines = cli("live", "--last", "-1", cwd=git_repo).stdout.splitlines()
    assert len(lines) == 3  # a worker's newline forges no event line of its own


def test_problem_mail_keeps_no_title_remnant(git_repo) -> None:
    from pilothouse.core.notify.compose import problem_mail
    from pilothouse.core.notify.settings import EmailSettings
    from pilothouse.core.stops.problems import Problem

    problem = Problem(code="P1", job="j", task="a", kind="gate_failed", summary=HOSTILE,
                      evidence={"output_tail": HOSTILE + "\n" + HOSTILE, "reason": HOSTILE},
                      replies=["retry"], state="open", opened_at="2026-01-01T00:00:00Z")
    settings = EmailSettings.model_validate({"address": "ph@example.org", "operator": "me@example.org",
                                            "imap_host": "localhost", "smtp_host": "localhost"})
    mail = problem_mail(settings, git_repo, problem)
    assert_inert(mail.get_content(), "problem mail body")
    assert_inert(str(mail["Subject"]), "problem mail subject")


def test_mcp_results_fence_hostile_text_inert() -> None:
    from pilothouse.core.mcp.untrusted import fence

    out = fence({"code": "P1", "summary": HOSTILE, "evidence": {"output_tail": HOSTILE, HOSTILE: [HOSTILE]}})
    assert_inert(json.dumps(out, ensure_ascii=False), "mcp result")
    assert "csi8" in out["untrusted"]["summary"]
