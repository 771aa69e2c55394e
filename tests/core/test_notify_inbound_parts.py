"""Which part of a reply by email is read, and whose Authentication-Results count (core/notify/inbound.py
through the watcher's `handle`): only a plain-text part that is no attachment carries a command; a mail
with none is refused as HTML-only only when it has an HTML part; only the trusted server's own
Authentication-Results, by its exact name, count as a second verdict; an automatic mail's refusal quotes
its headers cut to a fixed length."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path

import pytest
from mailservers import DkimKey, mail
from test_notify_inbound import BOX, OPERATOR, SERVER, Box


@pytest.fixture(scope="module")
def key() -> DkimKey:
    return DkimKey("example.org")


@pytest.fixture
def box(tmp_path: Path, key: DkimKey) -> Box:
    return Box(tmp_path / "repo", key)


def message() -> EmailMessage:
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = OPERATOR, BOX, "Re: [pilothouse]"
    m["Message-ID"] = make_msgid(domain="example.org")
    return m


# --- the other hops' Authentication-Results ------------------------------------------------------------

@pytest.mark.parametrize("hop", [
    "a.example.org",          # names that sort before the trusted server's
    "mx.example.org",
    "mx.pilothouse.tes",      # a prefix of it
    "mx.pilothouse.test.evil",  # it as a prefix
    "relay.example.org",      # and after it
    "zz.test",
])
def test_another_hops_header_below_the_servers_pass_is_not_a_second_one_of_the_server(box: Box, hop: str) -> None:
    # only a header naming exactly the trusted server could be a forged second verdict of it
    raw = (f"Authentication-Results: {SERVER}; dkim=pass header.d=example.org\r\n"
           f"Authentication-Results: {hop}; dkim=fail header.d=example.org\r\n").encode() + \
        mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and "recorded" in answer, (hop, answer)
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


@pytest.mark.parametrize("second", [SERVER, SERVER.upper()])
def test_the_servers_name_on_a_second_header_below_is_refused_as_forged(box: Box, second: str) -> None:
    raw = (f"Authentication-Results: {SERVER}; dkim=pass header.d=example.org\r\n"
           f"Authentication-Results: {second}; dkim=pass header.d=example.org\r\n").encode() + \
        mail(OPERATOR, BOX, f"{box.problem.code} retry")
    answer = box.handle(raw)
    assert answer is not None and f"more than one Authentication-Results header carries {SERVER}" in answer
    assert box.obeyed() == []


# --- which part is read -----------------------------------------------------------------------------

def test_a_plain_text_attachment_before_the_body_is_not_read(box: Box) -> None:
    code = box.problem.code
    m = message()
    m.make_mixed()
    att = EmailMessage()
    att.set_content(f"{code} skip\n", disposition="attachment", filename="notes.txt")
    m.attach(att)
    body = EmailMessage()
    body.set_content(f"{code} retry\n")
    m.attach(body)
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and answer.startswith(f"{code} retry: recorded"), answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


@pytest.mark.parametrize("other, why", [
    ("html", "HTML-only mail: send the reply as plain text"),
    ("none", "no plain-text part"),
])
def test_a_command_only_in_a_plain_text_attachment_is_not_obeyed(box: Box, other: str, why: str) -> None:
    code = box.problem.code
    m = message()
    if other == "html":
        m.set_content("<p>see the attachment</p>", subtype="html")
    else:
        m.set_content(b"\x89PNG\r\n", maintype="image", subtype="png")
    m.add_attachment(f"{code} retry\n", filename="reply.txt")
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and answer.startswith(f"refused: {why}"), answer
    assert box.obeyed() == []


def test_the_text_inside_an_alternative_is_read(box: Box) -> None:
    # the usual reply of a mail program: multipart/alternative of plain text and HTML, inside mixed
    code = box.problem.code
    m = message()
    m.set_content(f"{code} retry\n")
    m.add_alternative(f"<p>{code} skip</p>", subtype="html")
    m.add_attachment(b"\x00\x01", maintype="application", subtype="octet-stream", filename="x.bin")
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and answer.startswith(f"{code} retry: recorded"), answer
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


NON_TEXT = [("image", "png"), ("application", "pdf"), ("application", "octet-stream"), ("audio", "ogg"),
            ("text", "calendar"), ("text", "enriched"), ("text", "csv"), ("text", "x-markdown"),
            ("text", "xml"), ("video", "mp4"), ("text", "htmlx")]


@pytest.mark.parametrize("maintype, subtype", NON_TEXT)
def test_a_mail_with_no_plain_text_and_no_html_is_refused_as_having_no_plain_text(
        box: Box, maintype: str, subtype: str) -> None:
    # the refusal tells the operator what to do: "send it as plain text" only fits a mail that was HTML
    m = message()
    if maintype == "text":
        m.set_content(f"{box.problem.code} retry\n", subtype=subtype)
    else:
        m.set_content(b"\x00\x01\x02", maintype=maintype, subtype=subtype)
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and answer.startswith("refused: no plain-text part"), (subtype, answer)
    assert box.obeyed() == []


@pytest.mark.parametrize("maintype, subtype", NON_TEXT[:4] + NON_TEXT[-3:])
def test_an_html_part_among_other_parts_is_refused_as_html_only(box: Box, maintype: str, subtype: str) -> None:
    m = message()
    m.set_content(b"\x00\x01\x02", maintype="application", subtype="octet-stream", disposition="inline")
    m.make_mixed()
    for mt, st_ in ((maintype, subtype), ("text", "html")):
        part = EmailMessage()
        if mt == "text":
            part.set_content(f"<p>{box.problem.code} retry</p>", subtype=st_)
        else:
            part.set_content(b"\x00", maintype=mt, subtype=st_)
        m.attach(part)
    answer = box.handle(box.key.sign(m.as_bytes()))
    assert answer is not None and answer.startswith("refused: HTML-only mail"), (subtype, answer)
    assert box.obeyed() == []


# --- the refusal of an automatic mail ------------------------------------------------------------------

LONG_AUTO = "auto-generated-by-the-vacation-responder-of-example-org"  # 55 characters
LONG_PRECEDENCE = "first-class-and-then-some-more"                       # 30 characters


@pytest.mark.parametrize("headers, quoted", [
    ({"Auto-Submitted": LONG_AUTO, "Precedence": LONG_PRECEDENCE},
     f"Auto-Submitted: {LONG_AUTO[:40]}, Precedence: {LONG_PRECEDENCE[:20]}"),
    ({"Auto-Submitted": "auto-replied", "Precedence": LONG_PRECEDENCE[:21]},
     f"Auto-Submitted: auto-replied, Precedence: {LONG_PRECEDENCE[:20]}"),
    ({"Auto-Submitted": LONG_AUTO[:41]}, f"Auto-Submitted: {LONG_AUTO[:40]}, Precedence: -"),
    ({"Auto-Submitted": "Auto-Replied; owner=me", "Precedence": "BULK"},
     "Auto-Submitted: auto-replied, Precedence: bulk"),
    ({"Precedence": "list"}, "Auto-Submitted: no, Precedence: list"),
])
def test_an_automatic_mails_refusal_quotes_its_headers_cut_to_length(
        box: Box, headers: dict[str, str], quoted: str) -> None:
    # the sender writes these headers: the logged refusal quotes at most 40 and 20 characters of them
    raw = box.key.sign(mail(OPERATOR, BOX, f"{box.problem.code} retry", extra=headers,
                            msg_id="<auto1@example.org>"))
    assert box.handle(raw) is None
    assert box.obeyed() == []
    assert box.lines[-1] == (f"mail <auto1@example.org> from {OPERATOR}: refused: an automatic mail ({quoted}): "
                             "not read and not answered"), box.lines
