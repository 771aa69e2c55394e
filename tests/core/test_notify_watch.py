"""The email watcher against real mail servers on loopback (Dovecot for IMAP, aiosmtpd for SMTP):
a sim job stops on a gate failure, its mail arrives, a DKIM-signed `CODE retry` delivered to the
mailbox is obeyed, and the job finishes; the outbox's one-mail-per-problem, drop and backoff."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from email import message_from_bytes, policy
from pathlib import Path

import pytest
import yaml
from mailservers import DkimKey, Dovecot, SmtpSink, free_port, mail
from pilothouse.core import demo
from pilothouse.core.notify import mailstate
from pilothouse.core.notify.settings import EmailSettings, validate
from pilothouse.core.notify.watch import Watcher
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.stops import answering, problems
from support import git, guard, until

OPERATOR = "me@example.org"
BOX = "pilot@pilothouse.test"


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    server = Dovecot()
    yield server
    server.stop()


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    yield sink
    sink.stop()


def settings_for(dovecot: Dovecot, smtp_port: int) -> EmailSettings:
    return validate({"address": BOX, "operator": OPERATOR, "username": dovecot.user,
                     "imap_host": "127.0.0.1", "imap_port": dovecot.port, "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": smtp_port, "smtp_tls": "none"})


def _once(layout: RepoLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr


def _final_gate_fails_once(tmp_path: Path, cli) -> RepoLayout:
    """A sim job whose final full gate fails once (the merge runs it first, and passes)."""
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks

    quick = tmp_path / "quick.yaml"
    quick.write_text((demo._data() / "scenarios" / "demo-recovery.yaml").read_text().replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    (layout.root / ".gitignore").write_text((layout.root / ".gitignore").read_text() + ".tally\n")
    git(layout.root, "commit", "-qam", "ignore the gate's tally")
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "echo x >> .tally; test $(wc -l < .tally) -ne 2"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    entries = [{"id": "first", "title": "First", "expected_paths": {"write": ["notes/first.txt"]}}]
    save_tasks(layout, validate_tasks(entries, load_project(layout), job="demo"))
    assert cli("job", "plan-ready", "demo", "--repo", str(layout.root)).returncode == 0
    return layout


def test_a_gate_failure_is_mailed_and_a_signed_emailed_retry_finishes_the_job(
        tmp_path: Path, cli, dovecot: Dovecot, smtp: SmtpSink) -> None:
    key = DkimKey("example.org")
    layout = _final_gate_fails_once(tmp_path, cli)
    _once(layout)
    [problem] = problems.list_problems(layout, True, job="demo")
    assert problem.kind == "gate_failed"

    watcher = Watcher(settings_for(dovecot, smtp.port), dovecot.password, repos=lambda: [layout.root],
                      dnsfunc=key.dns, idle_s=5)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        sent = smtp.wait_for(lambda m: problem.code in str(m["Subject"]))
        assert str(sent["Subject"]) == f"[pilothouse] {problem.code} demo: gate_failed"
        assert str(sent["To"]) == OPERATOR and str(sent["From"]) == BOX
        body = sent.get_content()  # type: ignore[attr-defined]
        assert "the full gate failed" in body and f"{problem.code} retry" in body and "Evidence:" in body

        quoted = "\n".join("> " + line for line in body.splitlines())
        reply = mail(OPERATOR, BOX, f"{problem.code} retry\n\nOn Tue, pilothouse wrote:\n{quoted}\n",
                     subject=f"Re: {sent['Subject']}", extra={"In-Reply-To": str(sent["Message-ID"])})
        dovecot.append(key.sign(reply))
        answer = smtp.wait_for(lambda m: str(m["Subject"]).startswith("Re:") and
                               str(m["In-Reply-To"]) == str(message_from_bytes(reply, policy=policy.default)["Message-ID"]))
        assert f"{problem.code} retry: recorded for demo (gate_failed)" in answer.get_content()  # type: ignore[attr-defined]
    finally:
        stop.set()
        thread.join(timeout=guard(30))
    assert not thread.is_alive()
    _once(layout)
    conn = store.connect(layout.state_db, readonly=True)
    assert conn.execute("SELECT state FROM jobs_state WHERE job='demo'").fetchone()["state"] == "accepted"
    conn.close()
    assert len([m for m in smtp.messages if problem.code in str(m["Subject"])]) == 2  # the problem's, the answer
    why = cli("why", "demo", "--repo", str(layout.root))
    assert f"reply retry by {OPERATOR} (email)" in why.stdout, why.stdout


REPLY_STYLES = {
    # Gmail's default: the answer on top, the mail below with a header and '>' quoting
    "top": "{code} skip\n\nOn Tue, Dec 2, 2026 at 10:04 AM pilothouse <{box}> wrote:\n\n{quoted}\n",
    # mutt, K-9, list habits: the quote first, the answer below it, a signature last
    "bottom": "On Tue, Dec 02, 2026 at 10:04:00AM +0000, pilothouse wrote:\n{quoted}\n\n{code} skip\n\n-- \nMe\n",
    # the answer between two quoted parts
    "interleaved": "{first}\n\n{code} skip\n\n{rest}\n",
}


def test_replies_top_bottom_and_interleaved_are_each_obeyed_once_through_the_real_servers(
        tmp_path: Path, dovecot: Dovecot, smtp: SmtpSink) -> None:
    key = DkimKey("example.org")
    layout = RepoLayout(tmp_path / "repo")
    layout.ai.mkdir(parents=True)
    opened = {style: problems.open_problem(layout, "demo", f"t-{style}", "gate_failed", "the fast gate failed")
              for style in REPLY_STYLES}
    watcher = Watcher(settings_for(dovecot, smtp.port), dovecot.password, repos=lambda: [layout.root],
                      dnsfunc=key.dns, idle_s=5)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        for style, problem in opened.items():
            sent = smtp.wait_for(lambda m, c=problem.code: c in str(m["Subject"]) and not str(m["Subject"]).startswith("Re:"))
            lines = ["> " + line for line in sent.get_content().splitlines()]  # type: ignore[attr-defined]
            body = REPLY_STYLES[style].format(code=problem.code, box=BOX, quoted="\n".join(lines),
                                              first="\n".join(lines[:3]), rest="\n".join(lines[3:]))
            reply = mail(OPERATOR, BOX, body, subject=f"Re: {sent['Subject']}",
                         extra={"In-Reply-To": str(sent["Message-ID"])})
            dovecot.append(key.sign(reply))
            answer = smtp.wait_for(lambda m, r=reply: str(m["In-Reply-To"]) == str(
                message_from_bytes(r, policy=policy.default)["Message-ID"]))
            assert f"{problem.code} skip: recorded" in answer.get_content(), (style, answer.get_content())  # type: ignore[attr-defined]
    finally:
        stop.set()
        thread.join(timeout=guard(30))
    assert not thread.is_alive()
    conn = store.connect(layout.state_db, readonly=True)
    got = sorted((r["code"], r["reply"]) for r in conn.execute("SELECT code, reply FROM replies"))
    conn.close()
    assert got == sorted((p.code, "skip") for p in opened.values())  # each once, none twice


def _one_problem(tmp_path: Path) -> tuple[RepoLayout, problems.Problem]:
    layout = RepoLayout(tmp_path / "repo")
    layout.ai.mkdir(parents=True)
    return layout, problems.open_problem(layout, "demo", "one", "gate_failed", "the fast gate failed")


def test_a_problem_answered_before_its_mail_goes_out_is_not_mailed(tmp_path: Path, smtp: SmtpSink) -> None:
    layout, problem = _one_problem(tmp_path)
    conf = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_tls": "none"})
    watcher = Watcher(conf, None, repos=lambda: [layout.root], log=lambda line: None)
    conn = mailstate.connect()
    assert watcher.queue_new_problems(conn) == 1
    assert watcher.queue_new_problems(conn) == 0  # one mail per problem
    answering.act(layout, problem.code, "skip")    # answered at the terminal meanwhile
    watcher.flush(conn)
    assert conn.execute("SELECT state FROM outbox").fetchone()["state"] == "dropped"
    time.sleep(0.2)
    assert smtp.messages == []


def test_a_problem_answered_while_its_mail_is_sent_gets_a_note_that_it_was_already_answered(
        tmp_path: Path, smtp: SmtpSink) -> None:
    layout, problem = _one_problem(tmp_path)
    conf = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_tls": "none"})
    watcher = Watcher(conf, None, repos=lambda: [layout.root], log=lambda line: None)
    conn = mailstate.connect()
    # the answer lands while the server is taking the mail (over MCP, the same moment)
    smtp.on_data = lambda m: (problem.code in str(m["Subject"]) and not str(m["Subject"]).startswith("Re:")
                              and answering.act(layout, problem.code, "skip", who="mcp"))
    assert watcher.queue_new_problems(conn) == 1
    watcher.flush(conn)
    smtp.on_data = None
    watcher.flush(conn)
    first, note = smtp.messages
    assert str(note["In-Reply-To"]) == str(first["Message-ID"])
    assert f"{problem.code} was already answered (skip by mcp" in note.get_content()  # type: ignore[attr-defined]
    assert watcher.queue_new_problems(conn) == 0  # and nothing more about it


def test_an_smtp_outage_keeps_the_mail_queued_and_backs_off_until_it_goes(tmp_path: Path, smtp: SmtpSink) -> None:
    layout, problem = _one_problem(tmp_path)
    down = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": free_port(), "smtp_tls": "none"})
    lines: list[str] = []
    watcher = Watcher(down, None, repos=lambda: [layout.root], log=lines.append)
    conn = mailstate.connect()
    watcher.queue_new_problems(conn)
    started = time.time()
    watcher.flush(conn)
    row = conn.execute("SELECT * FROM outbox").fetchone()
    assert (row["state"], row["attempts"]) == ("queued", 1) and row["next_at"] >= started + mailstate.BACKOFF_S
    watcher.flush(conn, now=row["next_at"])
    row = conn.execute("SELECT * FROM outbox").fetchone()
    # each wait twice the last
    assert row["attempts"] == 2 and row["next_at"] >= started + mailstate.BACKOFF_S * 3
    assert any("ConnectionRefusedError" in line for line in lines)
    watcher.settings = validate({**down.model_dump(), "smtp_port": smtp.port})  # the server is back
    watcher.flush(conn, now=row["next_at"])
    assert conn.execute("SELECT state FROM outbox").fetchone()["state"] == "sent"
    assert problem.code in str(smtp.wait_for(lambda m: True)["Subject"])


def test_a_problem_opened_before_email_was_set_up_is_not_mailed(tmp_path: Path) -> None:
    layout, _ = _one_problem(tmp_path)
    conf = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_tls": "none", "enabled_at": "2999-01-01T00:00:00.000Z"})
    watcher = Watcher(conf, None, repos=lambda: [layout.root], log=lambda line: None)
    assert watcher.queue_new_problems(mailstate.connect()) == 0


def test_mail_announced_during_a_search_is_looked_at_again_before_idling(dovecot: Dovecot) -> None:
    from pilothouse.core.notify import transport
    from pilothouse.core.notify.watch import _arrived_meanwhile

    client = transport.imap_connect(settings_for(dovecot, free_port()), dovecot.password)
    try:
        _arrived_meanwhile(client)           # what the SELECT announced
        assert client.search(["UNSEEN"]) == []
        assert not _arrived_meanwhile(client)
        dovecot.append(mail(OPERATOR, BOX, "status"))
        client.search(["UNSEEN"])            # the server tells of the new mail in this answer, once
        assert _arrived_meanwhile(client)
        assert not _arrived_meanwhile(client)
    finally:
        client.logout()


def test_pause_and_resume_by_email_stop_and_start_the_supervisor(tmp_path: Path) -> None:
    import json

    from pilothouse.core.supervisor import control as supervisor_ctl

    key = DkimKey("example.org")
    layout = demo.prepare(tmp_path / "repo", str(demo._data() / "scenarios" / "slow.yaml"))
    conf = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": free_port(), "smtp_tls": "none"})
    watcher = Watcher(conf, None, repos=lambda: [layout.root], dnsfunc=key.dns, log=lambda line: None)
    conn = mailstate.connect()

    def command(text: str) -> str:
        watcher.handle(key.sign(mail(OPERATOR, BOX, text)), conn)
        row = conn.execute("SELECT message FROM outbox WHERE code IS NULL ORDER BY id DESC").fetchone()
        return message_from_bytes(bytes(row["message"]), policy=policy.default).get_content()  # type: ignore[attr-defined,no-any-return]

    supervisor_ctl.start(layout)
    try:
        assert command("pause").startswith("paused (supervisor stopped; running workers finish) in: repo")
        assert supervisor_ctl.status(layout) is None
        assert "supervisor stopped" in command("status")
        assert command("resume") == "resumed in: repo\n"
        assert supervisor_ctl.status(layout) is not None
        assert command("resume").startswith("nothing to resume")
    finally:
        supervisor_ctl.stop(layout)
    events = [json.loads(x) for x in layout.events.read_text().splitlines()]
    assert [(e["type"], e["data"]["source"]) for e in events if e["type"].startswith("supervisor.") and
            e["data"].get("source")] == [("supervisor.paused", "email"), ("supervisor.resumed", "email")]


def test_job_start_starts_the_email_watcher_and_off_stops_it(tmp_path: Path, cli) -> None:
    from pilothouse.core.notify import settings as email_settings
    from pilothouse.core.notify import watch
    from pilothouse.core.supervisor import control as supervisor_ctl

    layout = demo.prepare(tmp_path / "repo", str(demo._data() / "scenarios" / "slow.yaml"))
    email_settings.save(validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1",
                                  "imap_port": free_port(), "imap_tls": "none", "smtp_host": "127.0.0.1",
                                  "smtp_port": free_port(), "smtp_tls": "none"}))
    try:
        done = cli("job", "start", "--repo", str(layout.root))
        assert done.returncode == 0, done.stderr
        assert "email watcher started" in done.stdout
        until(watch.running, "the email watcher runs", every=0.1)
        assert "email watcher started" not in cli("job", "start", "--repo", str(layout.root)).stdout  # one per user
        off = cli("notify", "email", "off")
        assert "the email watcher (pid " in off.stdout and "stopped" in off.stdout, off.stdout + off.stderr
        assert not watch.running()  # `off` ends it (SIGTERM) before it answers
    finally:
        supervisor_ctl.stop(layout)
        watch.stop_running()


def test_a_server_without_idle_is_polled(tmp_path: Path, smtp: SmtpSink) -> None:
    key = DkimKey("example.org")
    dovecot = Dovecot(idle=False)
    layout, problem = _one_problem(tmp_path)
    lines: list[str] = []
    conf = validate({**settings_for(dovecot, smtp.port).model_dump(), "poll_s": 5})
    watcher = Watcher(conf, dovecot.password, repos=lambda: [layout.root], dnsfunc=key.dns, log=lines.append)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        smtp.wait_for(lambda m: problem.code in str(m["Subject"]))
        dovecot.append(key.sign(mail(OPERATOR, BOX, f"{problem.code} skip")))
        smtp.wait_for(lambda m: str(m["Subject"]).startswith("Re:"), timeout=30)
        assert problems.get_problem(layout, problem.code).pending is not None
    finally:
        stop.set()
        thread.join(timeout=guard(30))
        dovecot.stop()
    assert any("the server has no IDLE, looking every 5s" in line for line in lines), lines


def test_a_damaged_store_in_one_repository_does_not_stop_the_mail_of_another(tmp_path: Path) -> None:
    damaged = RepoLayout(tmp_path / "damaged")
    damaged.runtime.mkdir(parents=True)
    damaged.state_db.write_bytes(b"not a database" * 100)
    layout, problem = _one_problem(tmp_path)
    lines: list[str] = []
    conf = validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_tls": "none"})
    watcher = Watcher(conf, None, repos=lambda: [damaged.root, layout.root], log=lines.append)
    conn = mailstate.connect()
    assert watcher.queue_new_problems(conn) == 1
    assert [r["code"] for r in conn.execute("SELECT code FROM outbox")] == [problem.code]
    assert any(line.startswith(f"{damaged.root}: cannot read its problems") for line in lines), lines


def test_a_mail_too_large_to_read_is_refused_from_its_headers(tmp_path: Path, dovecot: Dovecot,
                                                               smtp: SmtpSink) -> None:
    key = DkimKey("example.org")
    layout, problem = _one_problem(tmp_path)
    watcher = Watcher(settings_for(dovecot, smtp.port), dovecot.password, repos=lambda: [layout.root],
                      dnsfunc=key.dns, idle_s=5, log=lambda line: None)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        dovecot.append(key.sign(mail(OPERATOR, BOX, f"{problem.code} retry\n" + "x" * 400_000)))
        answer = smtp.wait_for(lambda m: str(m["Subject"]).startswith("Re:"))
        assert answer.get_content().startswith("refused: larger than 256 KiB")  # type: ignore[attr-defined]
    finally:
        stop.set()
        thread.join(timeout=guard(30))
    assert problems.get_problem(layout, problem.code).pending is None


def test_the_foreground_watcher_logs_to_its_file_and_stop_ends_it_keeping_the_settings(
        tmp_path: Path, cli, dovecot: Dovecot, smtp: SmtpSink) -> None:
    from pilothouse.core.notify import settings as email_settings
    from pilothouse.core.notify import watch
    from pilothouse.providers.errors import UserError

    setup = cli("notify", "email", "setup", "--address", BOX, "--operator", OPERATOR, "--username", dovecot.user,
                "--imap-host", "127.0.0.1", "--imap-port", str(dovecot.port), "--imap-tls", "none",
                "--smtp-host", "127.0.0.1", "--smtp-port", str(smtp.port), "--smtp-tls", "none",
                "--password-from-stdin", "--backend", "file", input=dovecot.password + "\n")
    assert setup.returncode == 0, setup.stderr
    fg = subprocess.Popen([sys.executable, "-m", "pilothouse", "notify", "email", "watch"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        assert fg.stderr is not None
        for line in fg.stderr:  # it says so on the terminal once it reads the mailbox in IDLE
            if "IDLE" in line:
                break
        assert "reading INBOX" in watch.log_file().read_text()  # and in email.log, as the docs say
        stopped = cli("notify", "email", "stop")
        assert stopped.returncode == 0 and f"the email watcher (pid {fg.pid}) stopped" in stopped.stdout, stopped
        assert fg.wait(timeout=guard(60)) == 0  # a guard: `stop` answered only once it had left
        assert "stopped" in watch.log_file().read_text().splitlines()[-1]
        assert email_settings.load() is not None  # stop is not off
        assert "no email watcher is running" in cli("notify", "email", "stop").stdout
        before = len(watch.log_file().read_text().splitlines())
        started = cli("notify", "email", "start")
        assert "email watcher started" in started.stdout, started.stdout + started.stderr
        deadline = time.monotonic() + 60  # a guard: the detached watcher's first line is the event
        while not any("watching INBOX" in line for line in watch.log_file().read_text().splitlines()[before:]):
            assert time.monotonic() < deadline, watch.log_file().read_text()[-500:]
            time.sleep(0.1)
        try:
            assert watch.stop_running() is not None and not watch.running()
        except UserError as exc:
            raise AssertionError(f"{exc}\n{watch.log_file().read_text()[-1500:]}") from None
    finally:
        if fg.poll() is None:
            fg.kill()
        watch.stop_running()
