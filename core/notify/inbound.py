"""One incoming mail, judged: who sent it, whether that is proven, and the command it carries.

A mail is obeyed only when all hold: it is small and well-formed MIME; its one From address is the
operator's; a DKIM signature aligned with that address verifies (dkimpy, against DNS), or the
topmost Authentication-Results header is the configured server's own and says dkim or spf pass for
the sender's domain (the sender can add any header below it: only the one the receiving server
put on top counts, and a second one carrying the server's name means someone forged it); and its
plain text holds one command (grammar.py). HTML-only mail is refused: a command is read from
plain text only, never guessed out of markup.

Everything here reads hostile bytes: any failure is a refusal with a reason, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from email import errors, policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import getaddresses
from typing import Any

from pilothouse.core.notify.grammar import Command, Unreadable, parse
from pilothouse.core.notify.settings import EmailSettings

MAX_MAIL = 256 * 1024
MAX_PARTS = 32
MAX_MESSAGE_ID = 250
_BROKEN = ("NoBoundaryInMultipartDefect", "StartBoundaryNotFoundDefect", "CloseBoundaryNotFoundDefect",
           "MultipartInvariantViolationDefect", "MissingHeaderBodySeparatorDefect")

DnsFunc = Callable[..., "bytes | None"]


@dataclass(frozen=True)
class Incoming:
    message_id: str | None
    sender: str | None           # the From address, when there is exactly one
    subject: str
    from_operator: bool          # the operator's address, by a person: it gets an answer
    command: Command | None = None
    refused: str | None = None   # why it is not obeyed
    proof: str = ""              # how the sender was authenticated


def _refuse(why: str, msg_id: str | None = None, sender: str | None = None, subject: str = "",
            operator: bool = False) -> Incoming:
    return Incoming(msg_id, sender, subject, operator, refused=why)


def _headers(raw: bytes) -> EmailMessage:
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0][:MAX_MAIL]
    return BytesParser(policy=policy.default).parsebytes(head, headersonly=True)  # type: ignore[return-value]


def _single(msg: EmailMessage, name: str) -> str | None:
    values = msg.get_all(name) or []
    return str(values[0]).strip() if len(values) == 1 else None


def _sender(msg: EmailMessage) -> str | None:
    values = msg.get_all("From") or []
    # the parser keeps what it can read and drops the rest: `me@example.org <mallory@evil.test>` comes out
    # as the first address alone, with a defect saying so; a From it had to cut names more than it shows
    if any(isinstance(d, errors.InvalidHeaderDefect) for v in values for d in getattr(v, "defects", ())):
        return None
    if len(values) != 1:
        return None
    found = getaddresses([str(values[0])])
    if len(found) != 1 or "@" not in found[0][1]:
        return None
    return found[0][1].strip().lower()


def _aligned(signer: str, domain: str) -> bool:
    signer, domain = signer.lower().rstrip("."), domain.lower().rstrip(".")
    return domain == signer or domain.endswith("." + signer)


def _given_keys(keys: dict[str, str], dnsfunc: DnsFunc | None) -> DnsFunc | None:
    """A DNS look-up that answers a domain's DKIM keys from the operator's settings (for every
    selector of exactly that domain) and asks DNS (or `dnsfunc`) for any other name."""
    if not keys:
        return dnsfunc

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        host = name.decode("ascii", "replace").lower().rstrip(".")
        selector, sep, domain = host.partition("._domainkey.")
        if sep and selector and domain in keys:
            return keys[domain].encode()
        if dnsfunc is not None:
            return dnsfunc(name, timeout=timeout)
        import dkim.dnsplug

        return dkim.dnsplug.get_txt(name, timeout=timeout)  # type: ignore[no-any-return]

    return lookup


def dkim_proof(raw: bytes, domain: str, dnsfunc: DnsFunc | None = None) -> str | None:
    """'dkim d=DOMAIN verified' when a DKIM signature of the sender's domain (or a parent domain) that
    covers Message-ID verifies."""
    import dkim

    kwargs: dict[str, Any] = {"dnsfunc": dnsfunc} if dnsfunc is not None else {}
    try:
        count = len(_headers(raw).get_all("DKIM-Signature") or [])
        for idx in range(min(count, 5)):
            d = dkim.DKIM(raw)
            if not (d.verify(idx=idx, **kwargs) and d.domain and _aligned(d.domain.decode("ascii", "replace"), domain)):
                continue
            # a signature that leaves Message-ID out lets anyone resend the signed mail as a new one
            prep = d.verify_headerprep(idx)
            if prep and b"message-id" in [h.lower() for h in prep[1]]:
                return f"dkim d={d.domain.decode('ascii', 'replace')} verified"
    except Exception:  # dkimpy raises many kinds on hostile signatures and DNS answers: a failure
        return None
    return None


def server_proof(msg: EmailMessage, server: str, domain: str) -> tuple[str | None, str]:
    """(proof, '') when the topmost Authentication-Results is `server`'s and passes dkim or spf for
    `domain`; else (None, why)."""
    import authres

    if not server:
        return None, "no trusted server is configured"
    values = [str(v) for v in (msg.get_all("Authentication-Results") or [])]
    if not values:
        return None, "no Authentication-Results header"
    parsed = []
    for v in values:
        try:
            parsed.append(authres.AuthenticationResultsHeader.parse_value(v))
        except Exception:  # authres raises its own and ValueError kinds on junk
            parsed.append(None)
    top = parsed[0]
    if top is None or str(top.authserv_id).lower() != server.lower():
        return None, f"the topmost Authentication-Results header is not {server}'s"
    if sum(1 for p in parsed if p is not None and str(p.authserv_id).lower() == server.lower()) > 1:
        return None, f"more than one Authentication-Results header carries {server}: one is forged"
    for res in top.results:
        method, result = str(res.method).lower(), str(res.result).lower()
        if result != "pass" or method not in ("dkim", "spf"):
            continue
        props = {f"{p.type}.{p.name}".lower(): str(p.value) for p in res.properties}
        if method == "dkim":
            signer = props.get("header.d") or props.get("header.i", "").split("@")[-1]
        else:
            signer = props.get("smtp.mailfrom", "").split("@")[-1]
        if signer and _aligned(signer, domain):
            return f"{method}=pass by {server}", ""
    return None, f"{server} reports no dkim or spf pass for {domain}"


def _plain_text(msg: EmailMessage) -> str:
    parts = list(msg.walk())
    if len(parts) > MAX_PARTS:
        raise Unreadable(f"more than {MAX_PARTS} MIME parts")
    for part in parts:
        broken = [type(d).__name__ for d in part.defects if type(d).__name__ in _BROKEN]
        if broken:
            raise Unreadable(f"malformed MIME ({broken[0]})")
    html = False
    for part in parts:
        if part.is_multipart() or part.get_content_disposition() == "attachment":
            continue
        ctype = part.get_content_type()
        if ctype == "text/plain":
            content = part.get_content()
            if not isinstance(content, str):
                raise Unreadable("the text part is not text")
            return content
        html = html or ctype == "text/html"
    if html:
        raise Unreadable("HTML-only mail: send the reply as plain text (commands are read only from plain text)")
    raise Unreadable("no plain-text part")


def read_mail(raw: bytes, settings: EmailSettings, dnsfunc: DnsFunc | None = None,
              size: int | None = None) -> Incoming:
    """Judge one mail (never raises). `size` is the server's count when only the headers of a mail too
    large to read were fetched."""
    try:
        return _judge(raw, settings, dnsfunc, size)
    except Exception as exc:  # the email package on a header it cannot take: a refusal, never a crash
        return _refuse(f"unreadable headers ({type(exc).__name__})")


def _judge(raw: bytes, settings: EmailSettings, dnsfunc: DnsFunc | None, size: int | None) -> Incoming:
    head = _headers(raw)
    msg_id = _single(head, "Message-ID")
    sender = _sender(head)
    subject = (_single(head, "Subject") or "")[:200]
    operator = sender == settings.operator
    auto = (_single(head, "Auto-Submitted") or "no").split(";")[0].strip().lower()
    precedence = (_single(head, "Precedence") or "").strip().lower()
    if auto != "no" or precedence in ("bulk", "junk", "list", "auto_reply"):
        # a vacation notice or a bounce: answering it could start a loop of automatic mails
        return _refuse(f"an automatic mail (Auto-Submitted: {auto[:40]}, Precedence: {precedence[:20] or '-'}): "
                       "not read and not answered", msg_id, sender, subject, False)
    if msg_id is not None and len(msg_id) > MAX_MESSAGE_ID:
        msg_id = None
    if max(size or 0, len(raw)) > MAX_MAIL:
        return _refuse(f"larger than {MAX_MAIL // 1024} KiB", msg_id, sender, subject, operator)
    if msg_id is None:
        return _refuse("no single Message-ID (a message must be acted on once)", msg_id, sender, subject, operator)
    if sender is None:
        return _refuse("no single From address", msg_id, sender, subject, operator)
    if not operator:
        return _refuse(f"from {sender}, not the operator's address", msg_id, sender, subject, operator)
    domain = sender.split("@", 1)[1]
    proof = dkim_proof(raw, domain, _given_keys(settings.dkim_keys, dnsfunc))
    if proof is None:
        proof, why = server_proof(head, settings.trust_server, domain)
        if proof is None:
            return _refuse(f"not authenticated: no DKIM signature of {domain} verifies, and {why}",
                           msg_id, sender, subject, operator)
    try:
        msg = BytesParser(policy=policy.default).parsebytes(raw)
        text = _plain_text(msg)  # type: ignore[arg-type]
        command = parse(text)
    except Unreadable as exc:
        return _refuse(str(exc), msg_id, sender, subject, operator)
    except Exception as exc:  # the email package on hostile MIME: a refusal, never a crash
        return _refuse(f"malformed MIME ({type(exc).__name__})", msg_id, sender, subject, operator)
    return Incoming(msg_id, sender, subject, True, command=command, proof=proof)
