"""The email watcher: one process per user (`pilothouse notify email watch`, or started with the
supervisor by `job start`), serving every registered repository.

Two threads. Outgoing: each new problem (opened after email was set up) gets one mail in the
outbox, woken by the repositories' event logs; the outbox is sent with backoff, and a problem
answered meanwhile has its mail dropped. Incoming: IMAP IDLE on the folder (polling every poll_s
where the server has no IDLE); each unseen mail is judged (inbound.py), acted on once per
Message-ID (decide.py) and answered. The supervisor never waits on any of it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.core.notify import compose, decide, mailstate, transport
from pilothouse.core.notify.inbound import MAX_MAIL, DnsFunc, Incoming, read_mail
from pilothouse.core.notify.settings import EmailSettings
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import problems
from pilothouse.providers import paths
from pilothouse.providers.errors import UserError

# one IDLE round, then a search: a server can miss announcing a mail that lands just as IDLE begins
# (Dovecot then finds it only at its own next check, 30 s later), so a round is kept short
IDLE_S = 20.0
WAKE_S = 5.0            # the outgoing thread looks at least this often (retries due, new repositories)
ANSWER_HOLD_S = 60.0    # an answer being sent is not the outgoing thread's until then
RECONNECT_MAX_S = 300.0


def log_file() -> Path:
    return paths.state_dir() / "email.log"


def lock_file() -> Path:
    return paths.state_dir() / "email-watch.lock"


def registered_repos() -> list[Path]:
    from pilothouse.core.records.repos import list_repos

    return [p for p in list_repos() if p.is_dir()]


class Watcher:
    def __init__(self, settings: EmailSettings, password: str | None,
                 repos: Callable[[], list[Path]] = registered_repos, *, dnsfunc: DnsFunc | None = None,
                 idle_s: float = IDLE_S, log: Callable[[str], None] | None = None) -> None:
        self.settings, self.password, self.repos = settings, password, repos
        self.dnsfunc, self.idle_s = dnsfunc, idle_s
        self._log = log or _append_log
        self.idling = False  # in the IMAP IDLE wait, where only an exception ends the block early

    def log(self, line: str) -> None:
        self._log(compose.clean(line).replace("\n", " "))

    # ------------------------------------------------------------ outgoing

    def queue_new_problems(self, conn: sqlite3.Connection) -> int:
        n = 0
        for repo in self.repos():
            layout = RepoLayout(repo)
            if not layout.state_db.exists():
                continue
            try:
                opened = [p for p in problems.list_problems(layout) if p.state == "open" and p.pending is None
                          and p.opened_at >= self.settings.enabled_at]
            except sqlite3.Error as exc:
                self.log(f"{repo}: cannot read its problems ({exc})")
                continue
            done = mailstate.mailed(conn, str(repo))
            for p in opened:
                if p.code in done:
                    continue
                mail = compose.problem_mail(self.settings, repo, p)
                if mailstate.queue(conn, bytes(mail), str(repo), p.code):
                    n += 1
                    self.log(f"queued the mail for problem {p.code} ({p.kind}) of {repo}")
        return n

    def _still_open(self, repo: str, code: str) -> bool:
        layout = RepoLayout(Path(repo))
        if not layout.state_db.exists():
            return False  # the repository or its store went away: nothing to ask about any more
        try:
            p = problems.get_problem(layout, code)
        except sqlite3.Error:
            return True   # cannot tell now (busy, damaged): a mail too many beats a stop unmentioned
        except UserError:
            return False  # no such problem any more (the store was rebuilt)
        return p.state == "open" and p.pending is None

    def flush(self, conn: sqlite3.Connection, now: float | None = None) -> None:
        for item in mailstate.due(conn, now):
            if item.code and item.repo and not self._still_open(item.repo, item.code):
                mailstate.finish(conn, item, "dropped", "answered before the mail went out")
                self.log(f"problem {item.code} was answered elsewhere: its mail is not sent")
                continue
            try:
                transport.send(self.settings, self.password, item.message)
            except Exception as exc:  # any SMTP or network failure: keep it queued, try later
                wait = mailstate.failed(conn, item, transport.describe(exc), now)
                self.log(f"sending mail {item.id} failed ({transport.describe(exc)}); next try in {wait:.0f}s")
                continue
            mailstate.finish(conn, item, "sent")
            self.log(f"sent mail {item.id}" + (f" for problem {item.code}" if item.code else ""))
            if item.code and item.repo and not self._still_open(item.repo, item.code):
                # answered while the mail was on its way (an answer over MCP the same moment): say so
                try:
                    answered = problems.get_problem(RepoLayout(Path(item.repo)), item.code)
                except (sqlite3.Error, UserError):
                    continue  # gone with its store: nothing to say about it
                mailstate.queue(conn, bytes(compose.already_answered_mail(self.settings, item.message, answered)))
                self.log(f"problem {item.code} was answered while its mail went out: a note says so")

    def _event_dirs(self) -> list[Path]:
        return [RepoLayout(r).runtime for r in self.repos() if RepoLayout(r).runtime.is_dir()]

    def outgoing(self, stop: threading.Event) -> None:
        """Mail new problems and send the outbox, woken by the repositories' event logs (and every
        WAKE_S at least, for retries due and repositories registered since)."""
        import watchfiles

        conn = mailstate.connect()
        dirs: list[Path] = []
        changes: Any = None
        try:
            while not stop.is_set():
                try:
                    self.queue_new_problems(conn)
                    self.flush(conn)
                    now = self._event_dirs()
                    if not now:
                        stop.wait(WAKE_S)
                        continue
                    if now != dirs:  # one long-lived watch, so nothing written between two looks is missed
                        dirs = now
                        changes = watchfiles.watch(*dirs, stop_event=stop, rust_timeout=int(WAKE_S * 1000),
                                                   yield_on_timeout=True, debounce=50, step=20,
                                                   watch_filter=lambda _c, p: p.endswith("events.jsonl"))
                    next(changes, None)
                except Exception as exc:  # a store, a disk or a watched folder that went away: keep going
                    self.log(f"the outbox failed: {transport.describe(exc)}; again in {WAKE_S:g}s")
                    dirs = []
                    stop.wait(WAKE_S)
        finally:
            conn.close()

    # ------------------------------------------------------------ incoming

    def handle(self, raw: bytes, conn: sqlite3.Connection, size: int | None = None) -> Incoming:
        """Judge one mail, act on it once, answer it."""
        mail = read_mail(raw, self.settings, self.dnsfunc, size=size)
        if mail.message_id and not mailstate.first_time(conn, mail.message_id):
            self.log(f"mail {mail.message_id} was acted on before: ignored")
            return mail
        if mail.refused is not None:
            text = f"refused: {mail.refused}"
        else:
            try:
                _, text = decide.obey(mail, self.repos(), conn)
            except Exception as exc:  # a store or supervisor failure: say so, keep watching
                text = f"refused: it could not be done ({transport.describe(exc)})"
        self.log(f"mail {mail.message_id} from {mail.sender}: {text}")
        if mail.message_id:
            mailstate.record_outcome(conn, mail.message_id, text)
        if mail.from_operator:
            self._answer(conn, compose.answer_mail(self.settings, mail.message_id, mail.subject, text))
        return mail

    def _answer(self, conn: sqlite3.Connection, message: Any) -> None:
        """Send an answer at once; queued first (due only after the first try's outcome is known),
        so a failed one is retried by the outgoing thread and never sent twice."""
        item = mailstate.queue_held(conn, bytes(message), ANSWER_HOLD_S)
        try:
            transport.send(self.settings, self.password, item.message)
        except Exception as exc:  # the outbox retries it with backoff
            mailstate.failed(conn, item, transport.describe(exc))
            self.log(f"answer {item.id} not sent yet ({transport.describe(exc)})")
            return
        mailstate.finish(conn, item, "sent")

    def check_mail(self, client: Any, conn: sqlite3.Connection) -> int:
        uids = client.search(["UNSEEN"])
        for uid in uids:
            size = int(client.fetch([uid], ["RFC822.SIZE"]).get(uid, {}).get(b"RFC822.SIZE", 0))
            part = b"BODY[]" if size <= MAX_MAIL else b"BODY[HEADER]"
            raw = client.fetch([uid], [part.replace(b"BODY", b"BODY.PEEK").decode()]).get(uid, {}).get(part, b"")
            client.add_flags([uid], [b"\\Seen"])
            self.handle(raw or b"", conn, size=size)
        return len(uids)

    def incoming(self, stop: threading.Event) -> None:
        conn = mailstate.connect()
        backoff = 1.0
        try:
            while not stop.is_set():
                try:
                    client = transport.imap_connect(self.settings, self.password)
                except Exception as exc:  # server down, refused login: try again later
                    self.log(f"IMAP {self.settings.imap_host}:{self.settings.imap_port}: {transport.describe(exc)}; "
                             f"again in {backoff:.0f}s")
                    stop.wait(backoff)
                    backoff = min(backoff * 2, RECONNECT_MAX_S)
                    continue
                backoff = 1.0
                try:
                    self._read_loop(client, conn, stop)
                except Exception as exc:  # the connection dropped: reconnect
                    self.log(f"IMAP connection lost: {transport.describe(exc)}")
                finally:
                    try:
                        client.logout()
                    except Exception:  # already closed
                        pass
        finally:
            conn.close()

    def _read_loop(self, client: Any, conn: sqlite3.Connection, stop: threading.Event) -> None:
        idle = b"IDLE" in client.capabilities()
        self.log(f"reading {self.settings.imap_folder} of {self.settings.imap_host}: "
                 + ("IDLE" if idle else f"the server has no IDLE, looking every {self.settings.poll_s}s"))
        while not stop.is_set():
            self.check_mail(client, conn)
            if _arrived_meanwhile(client):
                continue
            if not idle:
                stop.wait(self.settings.poll_s)
                continue
            client.idle()
            try:
                self.idling = True  # SIGTERM may now end the wait at once (main's `leave`)
                if not stop.is_set():  # a SIGTERM that came just before found no wait to end
                    client.idle_check(timeout=self.idle_s)
            finally:
                self.idling = False
                client.idle_done()

    def run(self, stop: threading.Event) -> None:
        out = threading.Thread(target=self.outgoing, args=(stop,), name="email-outgoing", daemon=True)
        out.start()
        try:
            self.incoming(stop)
        finally:
            stop.set()
            out.join(timeout=10)


def _arrived_meanwhile(client: Any) -> bool:
    """Whether the server announced new mail while we searched and fetched. It says so once, in
    an untagged EXISTS among those commands' responses, which imapclient leaves in imaplib's
    store; going into IDLE without looking again would miss that mail until the next round."""
    pending = getattr(getattr(client, "_imap", None), "untagged_responses", None)
    if not isinstance(pending, dict):
        return False
    announced = [pending.pop(name, None) for name in ("EXISTS", "RECENT")]  # both taken, every time
    return any(announced)


def _append_log(line: str) -> None:
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def hold_lock() -> Any:
    """The watcher's lock (one per user), or None when another watcher holds it."""
    path = lock_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def running() -> bool:
    from pilothouse.providers.fsutil import lock_held

    return lock_held(lock_file())


def stop_running(wait_s: float = 10.0) -> int | None:
    """Ask the running watcher to leave (SIGTERM) and wait until it has (its lock let go, at most
    `wait_s`); its pid, or None when none runs."""
    import signal

    if not running():
        return None
    try:
        pid = int(lock_file().read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        return None
    if not _wait_lock_free(lock_file(), wait_s):
        raise UserError(f"the email watcher (pid {pid}) did not stop within {wait_s:g}s: "
                        f"see {log_file()}, or end it with kill {pid}")
    return pid


def _wait_lock_free(path: Path, wait_s: float) -> bool:
    """Whether the lock on `path` is let go within `wait_s`: a blocking flock in a thread, woken by
    the kernel the moment the holder exits (no polling)."""
    freed = threading.Event()

    def take() -> None:
        with open(path, "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        freed.set()

    threading.Thread(target=take, daemon=True).start()
    return freed.wait(wait_s)


def start_detached() -> bool:
    """Start the watcher in its own session (stdio to the email log) unless one runs; True if started."""
    import subprocess

    if running():
        return False
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    from pilothouse.providers.hostpython import host_env, python_argv

    # isolated (-I, no PYTHONPATH) and away from any repository: the cwd of `job start` may hold a
    # worker's merged files, which a plain `python -m` would import first
    with open(path, "ab") as out:
        subprocess.Popen(python_argv("-m", "pilothouse.core.notify.watch"), cwd=path.parent, env=host_env(),
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True)
    return True


def start_with_supervisor() -> None:
    """With email set up, the watcher (one per user) runs whenever a supervisor does (`job start`)."""
    from pilothouse.core.notify import settings as email_settings

    try:
        if email_settings.load() is not None and start_detached():
            print(f"email watcher started; log: {log_file()}")
    except UserError as exc:  # the jobs go on without mail; say why there is none
        print(f"pilothouse: no email: {exc}", file=sys.stderr)


def main() -> int:
    """Run the watcher in the foreground until SIGTERM or Ctrl-C."""
    import signal

    from pilothouse.core.notify import settings as email_settings

    try:
        conf = email_settings.load()
        if conf is None:
            raise UserError("email is not set up: run `pilothouse notify email setup`")
        lock = hold_lock()
        if lock is None:
            raise UserError(f"an email watcher is already running (pid in {lock_file()})")
        password = email_settings.password()
    except UserError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    # stderr is the email log itself when started detached: the line goes there once
    to_terminal = not _same_file(sys.stderr, log_file())

    def log(line: str) -> None:  # the foreground watcher logs where the detached one does, and shows it
        _append_log(line)
        if to_terminal:
            print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    watcher = Watcher(conf, password, log=log)

    def leave(*_: Any) -> None:
        # every other wait sees the event at once; the IMAP IDLE wait blocks in poll() for its
        # round (11-19 s with a flag alone), so there the handler ends it with an exception,
        # raised only there: anywhere else it could land in the middle of a write or an import
        stop.set()
        if watcher.idling:
            raise Stopping

    signal.signal(signal.SIGTERM, leave)
    watcher.log(f"watching {conf.imap_folder} of {conf.address} for {conf.operator} (pid {os.getpid()})")
    try:
        watcher.run(stop)
    except (KeyboardInterrupt, Stopping):
        stop.set()
    watcher.log("stopped")
    return 0


def _same_file(stream: Any, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(path))
    except (OSError, ValueError, AttributeError):
        return False


class Stopping(BaseException):
    """SIGTERM: leave now (a BaseException, so no `except Exception` takes it for a lost connection)."""


if __name__ == "__main__":
    sys.exit(main())
