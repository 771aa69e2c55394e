"""Email figures: problem opened → its mail received by the SMTP server, and a reply delivered to
the IMAP mailbox → the reply applied (recorded for the supervisor), with the watcher on IMAP IDLE.

    python bench/email_replies.py [--rounds 5]

Goal (issue 16): reply delivered → applied ≤ 2 s with IDLE. Starts its own Dovecot (Debian's
dovecot-imapd) and aiosmtpd on loopback, like the tests; that Dovecot also looks at its mailbox
every second during IDLE, since it can miss announcing a mail that lands just as IDLE begins (the
bench delivers each reply right after a round, when that is likeliest). Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

# this file's folder first on sys.path would make it the stdlib's `email` package (nothing above
# imports it): the tests' folder, for the mail servers, takes its place
sys.path[0] = str(Path(__file__).resolve().parent.parent / "tests")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--rounds", type=int, default=5, help="problems mailed and replied to")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ph-bench-email-"))
    os.environ.update(HOME=str(home), PILOTHOUSE_HOME=str(home / "pilothouse"),
                      XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"))
    from mailservers import DkimKey, Dovecot, SmtpSink, mail
    from pilothouse.core.notify.settings import validate
    from pilothouse.core.notify.watch import Watcher
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.stops import problems

    dovecot, smtp, key = Dovecot(), SmtpSink(), DkimKey("example.org")
    layout = RepoLayout(home / "repo")
    layout.runtime.mkdir(parents=True)  # as in a repository where a supervisor has run
    conf = validate({"address": "pilot@pilothouse.test", "operator": "me@example.org", "username": dovecot.user,
                     "imap_host": "127.0.0.1", "imap_port": dovecot.port, "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_tls": "none"})
    watcher = Watcher(conf, dovecot.password, repos=lambda: [layout.root], dnsfunc=key.dns, log=lambda line: None)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    sent, applied = [], []
    try:
        time.sleep(1.0)  # the watcher connects and enters IDLE
        for i in range(args.rounds):
            t0 = time.monotonic()
            p = problems.open_problem(layout, "bench", f"t{i}", "gate_failed", f"round {i}")
            smtp.wait_for(lambda m, code=p.code: code in str(m["Subject"]))
            sent.append(time.monotonic() - t0)
            t1 = time.monotonic()
            dovecot.append(key.sign(mail("me@example.org", "pilot@pilothouse.test", f"{p.code} retry")))
            while problems.get_problem(layout, p.code).pending is None:
                if time.monotonic() - t1 > 30:
                    raise SystemExit(f"round {i}: the reply was not applied in 30 s")
                time.sleep(0.01)
            applied.append(time.monotonic() - t1)
    finally:
        stop.set()
        thread.join(timeout=30)
        smtp.stop()
        dovecot.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, xs in (("problem → email sent", sent), ("reply delivered → reply applied", applied)):
        print(f"{name}: median {statistics.median(xs):.3f} s, max {max(xs):.3f} s over {len(xs)} rounds")
    print("goal: reply delivered → applied ≤ 2 s with IDLE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
