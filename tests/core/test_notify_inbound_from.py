"""The From header of a reply by email, judged through the watcher's `handle` (core/notify/inbound.py):
a mail is the operator's only when its From names one mailbox, the operator's. A From naming more
than one (an address list, a group, the operator first or not, or a list the parser has to cut to
read) is no one's: never obeyed, never answered, however well it is signed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mailservers import DkimKey, mail
from test_notify_inbound import BOX, OPERATOR, Box

NOT_SINGLE = "refused: no single From address"


@pytest.fixture(scope="module")
def key() -> DkimKey:
    return DkimKey("example.org")


@pytest.fixture
def box(tmp_path: Path, key: DkimKey) -> Box:
    return Box(tmp_path / "repo", key)


def signed_from(box: Box, header: bytes, body: str) -> bytes:
    """A mail whose From is `header` as written, signed by the operator's domain (From included)."""
    raw = mail(OPERATOR, BOX, body)
    assert raw.count(f"From: {OPERATOR}\r\n".encode()) == 1
    return box.key.sign(raw.replace(f"From: {OPERATOR}\r\n".encode(), b"From: " + header + b"\r\n"))


def refused_as_no_single_from(box: Box, header: bytes) -> None:
    answer = box.handle(signed_from(box, header, f"{box.problem.code} retry"))
    assert answer is None, (header, answer)  # no answer: the operator's address is only one of several
    assert box.obeyed() == [], header
    assert NOT_SINGLE in box.lines[-1], (header, box.lines[-1])


@pytest.mark.parametrize("header", [
    # an address list, the operator first, in the middle or last
    b"me@example.org, mallory@evil.test",
    b"mallory@evil.test, me@example.org",
    b"Me <me@example.org>, Mallory <mallory@evil.test>",
    b"Mallory <mallory@evil.test>, Me <me@example.org>",
    b"me@example.org, mallory@example.org",  # another mailbox of the operator's own domain
    b"a@evil.test, me@example.org, b@evil.test",
    b"me@example.org, me@example.org",  # twice the operator is still two mailboxes
    b"me@example.org,\r\n mallory@evil.test",  # folded
    # a group, or a group beside an address
    b"us: me@example.org, mallory@evil.test;",
    b"us: mallory@evil.test, me@example.org;",
    b"us: me@example.org;, mallory@evil.test",
    b"mallory@evil.test, us: me@example.org;",
    # lists the parser cannot read whole: it keeps the first address and drops the rest
    b"me@example.org <mallory@evil.test>",
    b"Me <me@example.org> <mallory@evil.test>",
    b"<me@example.org> mallory@evil.test",
    b"<me@example.org><mallory@evil.test>",
    b"me@example.org\r\n\t<mallory@evil.test>",
    b"me@example.org;mallory@evil.test",
    b"me@example.org)<mallory@evil.test>",
])
def test_a_from_naming_more_than_one_mailbox_is_not_the_operators(box: Box, header: bytes) -> None:
    refused_as_no_single_from(box, header)


_OTHER = st.from_regex(r"[a-z]{1,8}@(evil\.test|example\.org|mail\.example\.org)", fullmatch=True).filter(
    lambda a: a != OPERATOR)
_NAME = st.sampled_from(["", "Me", "Mallory", '"Doe, J."', "=?utf-8?q?Z=C3=BCrich?="])


# no shrinking: each example is a signed mail through the watcher, and the header is in the message
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(others=st.lists(st.tuples(_NAME, _OTHER), min_size=1, max_size=3), me=_NAME, data=st.data(),
       group=st.sampled_from(["", "all", "head"]))
def test_any_list_or_group_holding_the_operator_and_another_is_not_the_operators(
        box: Box, others: list[tuple[str, str]], me: str, data: st.DataObject, group: str) -> None:
    mailboxes = [f"{n} <{a}>" if n else a for n, a in others]
    mailboxes.insert(data.draw(st.integers(0, len(mailboxes))), f"{me} <{OPERATOR}>" if me else OPERATOR)
    if group == "all":
        header = "us: " + ", ".join(mailboxes) + ";"
    elif group == "head":
        cut = data.draw(st.integers(1, len(mailboxes) - 1))
        header = "us: " + ", ".join(mailboxes[:cut]) + ";, " + ", ".join(mailboxes[cut:])
    else:
        header = ", ".join(mailboxes)
    refused_as_no_single_from(box, header.encode())


@pytest.mark.parametrize("header", [
    b"me@example.org", b"<me@example.org>", b"Me <me@example.org>", b'"Doe, Me" <me@example.org>',
    b"J. Doe <me@example.org>", "Zoë <me@example.org>".encode(), b"=?utf-8?q?Doe=2C_Me?= <me@example.org>",
    b"me@example.org (Me, and mallory@evil.test)", b"Me\r\n <me@example.org>", b"ME@EXAMPLE.ORG",
])
def test_one_mailbox_of_the_operator_with_any_display_name_or_comment_is_obeyed(box: Box, header: bytes) -> None:
    # a comma or an address inside a name, a comment or an encoded word names no second mailbox
    answer = box.handle(signed_from(box, header, f"{box.problem.code} retry"))
    assert answer is not None and "recorded" in answer, (header, answer, box.lines)
    assert box.obeyed() == [f"retry {OPERATOR} (email)"]


@pytest.mark.parametrize("address", ["evilme@example.org", "not.me@example.org", "me@example.org.evil.test",
                                     "me@mail.example.org", "me@example.orgx", "me@example.or"])
def test_an_address_that_only_ends_starts_or_holds_the_operators_is_not_the_operators(box: Box, address: str) -> None:
    # signed by the operator's own domain, so only the address itself tells it from the operator's
    answer = box.handle(signed_from(box, address.encode(), f"{box.problem.code} retry"))
    assert answer is None, (address, answer)  # no answer to a stranger
    assert box.obeyed() == [], address
    assert f"from {address}, not the operator's address" in box.lines[-1], (address, box.lines[-1])
