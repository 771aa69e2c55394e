"""The mail for a problem (core/notify/compose.py): what happened, the evidence's first lines, the
replies it takes; nothing secret and no control characters from worker-written text."""

from __future__ import annotations

from pathlib import Path

from pilothouse.core.notify.compose import problem_mail
from pilothouse.core.notify.settings import validate
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import problems
from pilothouse.providers import keys

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"


def test_the_problem_mail_shows_the_evidence_redacted_and_the_replies_it_takes(tmp_path: Path) -> None:
    keys.set_key("sim", SECRET, "file")
    layout = RepoLayout(tmp_path / "repo")
    layout.ai.mkdir(parents=True)
    tail = "\n".join(f"line {i}" for i in range(30)) + f"\nAPI_KEY={SECRET}\n\x1b]0;owned\x07\x1b[2Jdone"
    p = problems.open_problem(layout, "demo", "one", "gate_failed", f"the gate printed {SECRET}",
                              {"output_tail": f"E   token {SECRET}\n" + tail, "command": "pytest -q"})
    conf = validate({"address": "pilot@pilothouse.test", "operator": "me@example.org", "imap_host": "h",
                     "smtp_host": "h"})
    msg = problem_mail(conf, layout.root, p)
    body = msg.get_content()  # type: ignore[attr-defined]
    assert str(msg["Subject"]) == f"[pilothouse] {p.code} demo/one: gate_failed"
    assert (str(msg["To"]), str(msg["From"]), str(msg["Auto-Submitted"])) == (
        "me@example.org", "pilot@pilothouse.test", "auto-generated")
    assert SECRET not in msg.as_string() and "\x1b" not in body and "\x07" not in body
    assert "  output_tail: E   token " in body and "    line 6" in body and "line 7" not in body
    assert "(… 25 more lines)" in body and "  command: pytest -q" in body
    assert f"  {p.code} retry" in body and f"  {p.code} hint YOUR WORDS" in body and "skip" in body
    assert "accept" not in body.split("Reply to this mail")[1]   # gate_failed does not take accept


def test_an_answer_refers_to_the_mail_it_answers_only_by_a_plain_message_id() -> None:
    from pilothouse.core.notify.compose import answer_mail

    conf = validate({"address": "pilot@pilothouse.test", "operator": "me@example.org", "imap_host": "h",
                     "smtp_host": "h"})
    plain = answer_mail(conf, "<abc.1@example.org>", "Re: [pilothouse] x", "done")
    assert str(plain["In-Reply-To"]) == "<abc.1@example.org>" and str(plain["Subject"]) == "Re: [pilothouse] x"
    hostile = answer_mail(conf, "<a@b>\r\nBcc: everyone@example.net", "x\r\nBcc: y@z", "refused")
    assert hostile["In-Reply-To"] is None and hostile["Bcc"] is None
    assert "\n" not in str(hostile["Subject"]) and hostile.as_bytes().count(b"Bcc") == 1  # only in the subject text
