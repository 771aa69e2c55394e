"""Replies by email, judged and acted on (core/notify/inbound.py, grammar.py, decide.py through the
watcher's `handle`): only the operator's authenticated reply naming an open problem is obeyed, once;
every bad input is refused with a reason and never obeyed, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mailservers import DkimKey, free_port, mail
from pilothouse.core.notify import mailstate
from pilothouse.core.notify.grammar import Command, Unreadable, parse
from pilothouse.core.notify.inbound import read_mail
from pilothouse.core.notify.settings import EmailSettings, validate
from pilothouse.core.notify.watch import Watcher
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.stops import problems

OPERATOR = "me@example.org"
BOX = "pilot@pilothouse.test"
SERVER = "mx.pilothouse.test"


def email_settings(**changes: object) -> EmailSettings:
    return validate({"address": BOX, "operator": OPERATOR, "imap_host": "127.0.0.1", "imap_tls": "none",
                     "smtp_host": "127.0.0.1", "smtp_port": free_port(), "smtp_tls": "none", "trust_server": SERVER,
                     **changes})


@pytest.fixture(scope="module")
def key() -> DkimKey:
    return DkimKey("example.org")


class Box:
    """A repository with one open problem, and the watcher's handling of mail for it."""

    def __init__(self, root: Path, key: DkimKey) -> None:
        self.layout = RepoLayout(root)
        self.layout.ai.mkdir(parents=True)
        self.problem = problems.open_problem(self.layout, "demo", "one", "gate_failed", "the fast gate failed",
                                             {"output_tail": "E   assert 1 == 2"})
        self.key = key
        self.lines: list[str] = []
        self.watcher = Watcher(email_settings(), None, repos=lambda: [self.layout.root], dnsfunc=key.dns,
                               log=self.lines.append)
        self.conn = mailstate.connect()

    def handle(self, raw: bytes, size: int | None = None) -> str | None:
        """The answer mail's text (None when no answer is sent)."""
        before = {r["id"] for r in self.conn.execute("SELECT id FROM outbox")}
        self.watcher.handle(raw, self.conn, size=size)
        new = [r for r in self.conn.execute("SELECT * FROM outbox WHERE code IS NULL") if r["id"] not in before]
        if not new:
            return None
        from email import message_from_bytes, policy

        msg = message_from_bytes(bytes(new[-1]["message"]), policy=policy.default)
        assert str(msg["To"]) == OPERATOR
        return msg.get_content()  # type: ignore[attr-defined,no-any-return]

    def obeyed(self) -> list[str]:
        conn = store.connect(self.layout.state_db, readonly=True)
        try:
            return [f"{r['reply']} {r['who']}" for r in conn.execute("SELECT * FROM replies")]
        finally:
            conn.close()

    def signed(self, body: str, **kw: object) -> bytes:
        return self.key.sign(mail(OPERATOR, BOX, body, **kw))  # type: ignore[arg-type]


@pytest.fixture
def box(tmp_path: Path, key: DkimKey) -> Box:
    return Box(tmp_path / "repo", key)


def test_a_signed_reply_from_the_operator_is_obeyed_once_and_evented_as_email(box: Box) -> None:
    code = box.problem.code
    raw = box.signed(f"{code.lower()} retry\n\nOn Mon, pilothouse wrote:\n> {code} skip\n")
    answer = box.handle(raw)
    assert answer is not None and answer.startswith(f"{code} retry: recorded for demo/one (gate_failed)")
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]
    # the same Message-ID again (a second delivery, a resend): never acted on twice, no second answer
    assert box.handle(raw) is None
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]
    events = [json.loads(x) for x in box.layout.events.read_text().splitlines()]
    [emailed] = [e for e in events if e["type"] == "problem.email"]
    assert emailed["data"]["source"] == "email" and emailed["data"]["outcome"] == "obeyed"
    assert emailed["data"]["code"] == code and "dkim d=example.org verified" in emailed["data"]["summary"]


def test_hint_words_run_to_the_quote_and_the_signature_is_left_out(box: Box) -> None:
    code = box.problem.code
    raw = box.signed(f"{code} hint fold accents\nwith unicodedata first\n\n-- \n{code} skip\nMe\n")
    box.handle(raw)
    conn = store.connect(box.layout.state_db, readonly=True)
    row = conn.execute("SELECT reply, words FROM replies").fetchone()
    conn.close()
    assert (row["reply"], row["words"]) == ("hint", "fold accents with unicodedata first")


def test_a_reply_from_another_address_is_refused_and_not_answered(box: Box) -> None:
    other = DkimKey("evil.test")
    raw = other.sign(mail("mallory@evil.test", BOX, f"{box.problem.code} skip"))
    assert box.handle(raw) is None  # no answer to a stranger
    assert box.obeyed() == []
    assert any("from mallory@evil.test, not the operator's address" in line for line in box.lines)


def test_a_forged_from_signed_by_another_domain_is_refused(box: Box) -> None:
    other = DkimKey("evil.test")
    box.watcher.dnsfunc = lambda name, timeout=5: other.dns(name) or box.key.dns(name)
    raw = other.sign(mail(OPERATOR, BOX, f"{box.problem.code} skip"))
    answer = box.handle(raw)
    assert answer is not None and answer.startswith("refused: not authenticated")
    assert box.obeyed() == []


def test_a_signature_that_does_not_verify_is_refused(box: Box) -> None:
    raw = box.signed(f"{box.problem.code} retry\n").replace(b"retry", b"skip")
    answer = box.handle(raw)
    assert answer is not None and "no DKIM signature of example.org verifies" in answer
    assert box.obeyed() == []


def test_a_signature_that_leaves_the_message_id_out_is_not_enough(box: Box) -> None:
    # anyone holding such a mail could send it again under a new Message-ID
    raw = box.key.sign(mail(OPERATOR, BOX, f"{box.problem.code} retry"), headers=(b"from", b"to", b"subject"))
    answer = box.handle(raw)
    assert answer is not None and answer.startswith("refused: not authenticated")
    assert box.obeyed() == []


def test_a_reply_with_no_authentication_is_refused(box: Box) -> None:
    answer = box.handle(mail(OPERATOR, BOX, f"{box.problem.code} retry"))
    assert answer is not None and "no Authentication-Results header" in answer
    assert box.obeyed() == []


def test_the_trusted_servers_topmost_pass_is_obeyed(box: Box) -> None:
    raw = (f"Authentication-Results: {SERVER}; spf=pass smtp.mailfrom={OPERATOR}\r\n").encode() + \
        mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and "recorded" in answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


@pytest.mark.parametrize("headers, why", [
    # the server's own verdict on top fails; the pass below it was written by the sender
    ([f"{SERVER}; spf=fail smtp.mailfrom={OPERATOR}", f"{SERVER}; dkim=pass header.d=example.org"],
     f"more than one Authentication-Results header carries {SERVER}"),
    # the sender's header on top, naming another server
    (["mx.evil.test; dkim=pass header.d=example.org"], f"the topmost Authentication-Results header is not {SERVER}'s"),
    # the server's pass is for another domain than the From address's
    ([f"{SERVER}; dkim=pass header.d=evil.test"], f"{SERVER} reports no dkim or spf pass for example.org"),
    # the server's one verdict is a failure: that is no proof, whatever it names
    ([f"{SERVER}; dkim=fail header.d=example.org"], f"{SERVER} reports no dkim or spf pass for example.org"),
    ([f"{SERVER}; spf=softfail smtp.mailfrom={OPERATOR}; dkim=neutral header.d=example.org"],
     f"{SERVER} reports no dkim or spf pass for example.org"),
    # a hop after the server put its own on top: only the topmost counts, even with the server's pass below
    (["mx.evil.test; dkim=pass header.d=example.org", f"{SERVER}; dkim=pass header.d=example.org"],
     f"the topmost Authentication-Results header is not {SERVER}'s"),
    # alignment is by whole labels: ample.org is not a parent of example.org
    ([f"{SERVER}; dkim=pass header.d=ample.org"], f"{SERVER} reports no dkim or spf pass for example.org"),
    ([f"{SERVER}; spf=pass smtp.mailfrom=mallory@ample.org"], f"{SERVER} reports no dkim or spf pass for example.org"),
])
def test_an_authentication_result_the_server_did_not_give_is_refused(box: Box, headers: list[str], why: str) -> None:
    raw = b"".join(f"Authentication-Results: {h}\r\n".encode() for h in headers) + \
        mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and why in answer, answer
    assert box.obeyed() == []


def test_the_topmost_pass_is_obeyed_with_other_hops_headers_below_it(box: Box) -> None:
    # the sender's own relays add theirs first; the trusted server puts its verdict on top of them
    raw = (f"Authentication-Results: {SERVER}; dkim=pass header.d=example.org\r\n"
           "Authentication-Results: relay.example.org; none\r\n").encode() + \
        mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and "recorded" in answer, answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


def test_a_pass_for_a_parent_domain_of_the_senders_is_proof_by_whole_labels() -> None:
    # mail from a subdomain, signed by the organisation's domain: aligned (DMARC's relaxed alignment)
    sender = "me@mail.example.org"
    settings = email_settings(operator=sender)
    for signer, proof in (("example.org", f"dkim=pass by {SERVER}"), ("ample.org", ""), ("il.example.org", "")):
        raw = f"Authentication-Results: {SERVER}; dkim=pass header.d={signer}\r\n".encode() + \
            mail(sender, BOX, "ACDEFH retry")
        judged = read_mail(raw, settings)
        assert judged.proof == proof, (signer, judged)
        assert (judged.refused is None) == bool(proof), (signer, judged.refused)


def test_a_spf_failure_beside_the_servers_dkim_pass_is_still_proof(box: Box) -> None:
    # a forwarded mail fails SPF at the last hop, while the operator's DKIM signature still passes
    raw = (f"Authentication-Results: {SERVER}; spf=fail smtp.mailfrom=list@lists.test; "
           "dkim=pass header.d=example.org\r\n").encode() + mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and "recorded" in answer, answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


def test_the_operators_signature_counts_below_another_domains(box: Box) -> None:
    # a mailing list or a relay signs the mail again, on top of the operator's own signature
    relay = DkimKey("relay.test")
    box.watcher.dnsfunc = lambda name, timeout=5: relay.dns(name) or box.key.dns(name)
    raw = relay.sign(box.signed(f"{box.problem.code} retry"))
    answer = box.handle(raw)
    assert answer is not None and "recorded" in answer, answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


def test_a_dkim_signature_of_a_domain_that_only_ends_the_same_is_refused(box: Box) -> None:
    # ample.org's key verifies, but ample.org is not example.org nor a parent of it
    other = DkimKey("ample.org")
    box.watcher.dnsfunc = lambda name, timeout=5: other.dns(name) or box.key.dns(name)
    raw = other.sign(mail(OPERATOR, BOX, f"{box.problem.code} retry"))
    answer = box.handle(raw)
    assert answer is not None and "no DKIM signature of example.org verifies" in answer, answer
    assert box.obeyed() == []


@pytest.mark.parametrize("header", [{"Auto-Submitted": "auto-replied"}, {"Precedence": "bulk"}])
def test_an_automatic_mail_from_the_operator_is_neither_obeyed_nor_answered(box: Box, header: dict[str, str]) -> None:
    # a vacation notice answering pilothouse's mail: an answer to it could start a mail loop
    raw = box.key.sign(mail(OPERATOR, BOX, f"{box.problem.code} retry", extra=header))
    assert box.handle(raw) is None
    assert box.obeyed() == []
    assert any("an automatic mail" in line for line in box.lines)


def test_an_unknown_or_closed_code_is_refused(box: Box) -> None:
    answer = box.handle(box.signed("ACDEFH retry"))
    assert answer is not None and answer.startswith("refused: no problem ACDEFH")
    problems.close_problem(box.layout, box.problem.code, "fixed by hand")
    answer = box.handle(box.signed(f"{box.problem.code} retry"))
    assert answer is not None and answer.startswith(f"refused: problem {box.problem.code} is closed")
    assert box.obeyed() == []
    events = [json.loads(x) for x in box.layout.events.read_text().splitlines()]
    assert [e["data"]["outcome"] for e in events if e["type"] == "problem.email"] == ["refused"]


def test_a_reply_that_does_not_fit_the_problem_is_refused(box: Box) -> None:
    answer = box.handle(box.signed(f"{box.problem.code} accept"))
    assert answer is not None and "'accept' does not fit problem" in answer
    assert box.obeyed() == []


@pytest.mark.parametrize("body", [
    "> {code} retry\n",                                             # only in the quote
    "Thanks!\n\nOn Mon, pilothouse wrote:\n> {code} retry\n",       # words, then the quote
    "-- \n{code} retry\n",                                           # only in the signature
])
def test_a_command_only_in_quoted_text_or_the_signature_is_not_obeyed(box: Box, body: str) -> None:
    answer = box.handle(box.signed(body.format(code=box.problem.code)))
    assert answer is not None and answer.startswith("refused:")
    assert box.obeyed() == []


def test_html_only_mail_is_refused(box: Box) -> None:
    from email.message import EmailMessage
    from email.utils import make_msgid

    m = EmailMessage()
    m["From"], m["To"], m["Subject"], m["Message-ID"] = OPERATOR, BOX, "Re: x", make_msgid(domain="example.org")
    m.set_content(f"<p>{box.problem.code} retry</p>", subtype="html")
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and "HTML-only mail" in answer
    assert box.obeyed() == []


def test_huge_or_malformed_mime_is_refused_without_a_crash(box: Box) -> None:
    code = box.problem.code
    huge = box.signed(f"{code} retry\n" + "x" * 300_000)
    assert "larger than 256 KiB" in (box.handle(huge) or "")
    # only the headers of a mail too large to fetch, with the server's size
    head = box.signed(f"{code} retry\n").split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    assert "larger than 256 KiB" in (box.handle(head, size=10_000_000) or "")
    broken = (f"From: {OPERATOR}\r\nTo: {BOX}\r\nSubject: x\r\nMessage-ID: <b1@example.org>\r\n"
              "MIME-Version: 1.0\r\nContent-Type: multipart/mixed\r\n\r\n--x\r\n" + f"{code} retry\r\n").encode()
    answer = box.handle(box.key.sign(broken))
    assert answer is not None and "malformed MIME" in answer
    for junk in (b"\x00\xff" * 500, b"From: \xff\xfe\r\n\r\n", b"", f"From: {OPERATOR}\r\n\r\n{code} retry".encode()):
        box.handle(junk)  # no Message-ID, no From, no authentication: each refused, none raises
    assert box.obeyed() == []


def test_a_mail_of_too_many_parts_is_refused(box: Box) -> None:
    from email.message import EmailMessage

    for extra, refused in ((31, True), (40, True), (30, False)):  # the root and its text count too
        m = EmailMessage()
        m["From"], m["To"], m["Subject"] = OPERATOR, BOX, "Re: [pilothouse]"
        m["Message-ID"] = f"<parts-{extra}@example.org>"
        m.set_content(f"{box.problem.code} hint keep going")
        for i in range(extra):
            m.add_attachment(b"x", maintype="application", subtype="octet-stream", filename=f"{i}.bin")
        answer = box.handle(box.key.sign(m.as_bytes()))
        assert answer is not None, extra
        assert ("more than 32 MIME parts" if refused else "recorded") in answer, (extra, answer)


def test_a_mail_with_two_message_ids_is_refused(box: Box) -> None:
    # which one is "the" mail? a second delivery under the other id would be obeyed again
    raw = mail(OPERATOR, BOX, f"{box.problem.code} retry", msg_id="<one@example.org>")
    raw = raw.replace(b"Message-ID: <one@example.org>", b"Message-ID: <one@example.org>\r\nMessage-ID: <two@example.org>")
    answer = box.handle(box.key.sign(raw))
    assert answer is not None and "no single Message-ID" in answer, answer
    assert box.obeyed() == []


def test_status_lists_the_open_problems(box: Box) -> None:
    answer = box.handle(box.signed("Status\n"))
    assert answer is not None and "supervisor stopped, 1 open problem(s)" in answer
    assert f"{box.problem.code}  demo/one  gate_failed  [retry | skip | hint | plan]" in answer


@pytest.mark.parametrize("text, command", [
    ("ACDEFH retry", Command("answer", "ACDEFH", "retry")),
    ("  acdefh Plan split it in two\n  and test it\n> quoted", Command("answer", "ACDEFH", "plan",
                                                                          "split it in two and test it")),
    ("pause\n", Command("pause")),
    ("resume.\n-- \nme", Command("resume")),
])
def test_the_grammar_reads_the_first_own_line(text: str, command: Command) -> None:
    assert parse(text) == command


@pytest.mark.parametrize("text, why", [
    ("", "no command outside the quoted text"),
    ("ACDEFH", "ACDEFH without a reply"),
    ("ACDEFH retry now", "'retry' takes no words"),
    ("ACDEFH frobnicate", "'frobnicate' is not a reply"),
    ("please retry", "'please' is not a problem's code"),
    ("ABCDEF retry", "'ABCDEF' is not a problem's code"),   # B and 0-like letters are never in a code
    ("status please", "'status' takes nothing after it"),
])
def test_the_grammar_says_what_to_write_instead(text: str, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        parse(text)


_HEADER_LINES = st.sampled_from([
    f"From: {OPERATOR}", "From: =?utf-8?q?=FF?= <x@y>", "From: a@b, c@d", "From: <>", "Message-ID: <m@x>",
    "Message-ID:", "Content-Type: multipart/mixed", 'Content-Type: multipart/alternative; boundary="b"',
    "Content-Type: text/plain; charset=unknown-8bit", "Content-Transfer-Encoding: base64",
    "Content-Transfer-Encoding: quoted-printable", f"Authentication-Results: {SERVER}; dkim=pass header.d=example.org",
    f"Authentication-Results: {SERVER}; ((", "DKIM-Signature: v=1; a=rsa-sha256; d=example.org; s=test; b=;",
    "DKIM-Signature: garbage", "Subject: =?utf-8?b?////?=", "--b", "--b--", "Content-Type: text/html"])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.one_of(_HEADER_LINES, st.text(max_size=60)), max_size=20), tail=st.binary(max_size=200))
def test_no_mail_makes_the_judge_raise_and_none_unauthenticated_is_obeyed(lines: list[str], tail: bytes) -> None:
    raw = "\r\n".join(lines).encode("utf-8", "surrogateescape") + b"\r\n\r\nACDEFH retry\r\n" + tail
    judged = read_mail(raw, email_settings(), dnsfunc=lambda name, timeout=5: None)
    assert judged.command is None or judged.proof.endswith(f"by {SERVER}")


def test_a_dkim_key_given_in_the_settings_verifies_without_dns_and_only_for_its_domain(
        key: DkimKey, tmp_path: Path, cli) -> None:
    import subprocess

    from pilothouse.core.notify.inbound import read_mail

    raw = key.sign(mail(OPERATOR, BOX, "status"))
    nowhere = lambda name, timeout=5: None  # noqa: E731 - DNS that knows no key: the given one must do
    assert read_mail(raw, email_settings(trust_server=""), dnsfunc=nowhere).command is None
    given = email_settings(trust_server="", dkim_keys={"example.org": key.record.decode()})
    judged = read_mail(raw, given, dnsfunc=nowhere)
    assert judged.command is not None and judged.proof == "dkim d=example.org verified"
    # another domain's key is no proof for example.org's mail
    other = email_settings(trust_server="", dkim_keys={"example.net": key.record.decode()})
    assert read_mail(raw, other, dnsfunc=nowhere).command is None

    # through the command: a PEM public key file, shown by domain in status, forgotten with DOMAIN=
    pem = subprocess.run(["openssl", "rsa", "-pubout"], input=key.private, capture_output=True, check=True).stdout
    (tmp_path / "example.org.pem").write_bytes(pem)
    base = ["notify", "email", "setup", "--address", BOX, "--operator", OPERATOR, "--imap-host", "127.0.0.1",
            "--imap-tls", "none", "--smtp-host", "127.0.0.1", "--smtp-tls", "none", "--no-password"]
    done = cli(*base, "--dkim-key", f"example.org={tmp_path / 'example.org.pem'}")
    assert done.returncode == 0, done.stderr
    from pilothouse.core.notify import settings as st

    saved = st.load()
    assert saved is not None and saved.dkim_keys == {"example.org": key.record.decode()}
    assert "dkim_keys: example.org (given)" in cli("notify", "email", "status").stdout
    bad = cli(*base, "--dkim-key", f"example.org={tmp_path / 'missing.pem'}")
    assert bad.returncode == 2 and "missing.pem" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert cli(*base, "--dkim-key", "example.org=").returncode == 0
    assert st.load().dkim_keys == {}  # type: ignore[union-attr]
