"""The mails pilothouse sends: one per new problem, and the answer to each reply it read.

A problem's summary and evidence are worker-touched text: they pass through the same redaction as
the logs (every configured key, in its encoded forms too) and lose control characters before they
go in a mail (providers/untrusted.py).
"""

from __future__ import annotations

import re
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from pilothouse.core.notify.settings import EmailSettings
from pilothouse.core.stops.problems import Problem
from pilothouse.core.stops.replies import NEEDS_WORDS, REPLY_HELP

EVIDENCE_LINES = 8       # per evidence field
EVIDENCE_TOTAL = 40
LINE_CHARS = 200
_MSG_ID = re.compile(r"^<[!-;=?-~]{1,240}>$")


def clean(text: str) -> str:
    """Worker-touched `text` for a mail: keys redacted, then made inert (no escape sequence, nor
    what one leaves behind: a mail client shown in a terminal obeys them too)."""
    from pilothouse.providers.redact import configured_redactor
    from pilothouse.providers.untrusted import inert

    return inert(configured_redactor()(text))


def _base(settings: EmailSettings, subject: str, body: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = settings.address
    msg["To"] = settings.operator
    msg["Subject"] = clean(subject).replace("\n", " ")[:200]
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=settings.address.split("@", 1)[1])
    msg["Auto-Submitted"] = "auto-generated"   # RFC 3834: no vacation replies back at us
    msg.set_content(body)
    return msg


def evidence_lines(problem: Problem) -> list[str]:
    out: list[str] = []
    for key, value in problem.evidence.items():
        lines = clean(str(value)).splitlines() or [""]
        shown = [line[:LINE_CHARS] for line in lines[:EVIDENCE_LINES]]
        more = f"  (… {len(lines) - len(shown)} more lines)" if len(lines) > len(shown) else ""
        out.append(f"  {key}: {shown[0]}")
        out.extend(f"    {line}" for line in shown[1:])
        if more:
            out.append(more)
        if len(out) >= EVIDENCE_TOTAL:
            out = [*out[:EVIDENCE_TOTAL], "  (… more in `pilothouse problem show`)"]
            break
    return out


def problem_mail(settings: EmailSettings, repo: Path, problem: Problem) -> EmailMessage:
    where = f"{problem.job}/{problem.task}" if problem.task else problem.job
    subject = f"[pilothouse] {problem.code} {where}: {problem.kind}"
    replies = []
    for r in problem.replies:
        example = f"{problem.code} {r} YOUR WORDS" if r in NEEDS_WORDS else f"{problem.code} {r}"
        replies.append(f"  {example:<30} {REPLY_HELP.get(r, '')}")
    body = "\n".join([
        f"{where} in {repo.name} stopped: {problem.kind}.",
        "",
        clean(problem.summary),
        "",
        "Evidence:",
        *(evidence_lines(problem) or ["  (none)"]),
        "",
        "Reply to this mail with one of these, above or below the quoted mail:",
        *replies,
        "",
        "Only a reply from your own address, authenticated (DKIM or SPF), is obeyed; quoted text and",
        "your signature are ignored. `status`, `pause` or `resume` alone on a line work too.",
        f"Repository: {repo}",
    ])
    return _base(settings, subject, body + "\n")


def answer_mail(settings: EmailSettings, to_message_id: str | None, subject: str, text: str) -> EmailMessage:
    """The answer to one mail read: what was done, or why it was refused."""
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject or '[pilothouse]'}"
    msg = _base(settings, subject, clean(text) + "\n")
    if to_message_id and _MSG_ID.match(to_message_id):  # the sender wrote it: only a plain <id@host>
        msg["In-Reply-To"] = to_message_id
        msg["References"] = to_message_id
    return msg


def already_answered_mail(settings: EmailSettings, sent: bytes, problem: Problem) -> EmailMessage:
    """Sent after a problem's mail when the problem was answered while that mail was on its way:
    so the operator does not answer it again."""
    from email.parser import BytesHeaderParser

    head = BytesHeaderParser(policy=policy.default).parsebytes(sent)
    pend = problem.pending or {}  # a reply the supervisor has not taken yet counts as the answer
    reply, who = problem.answer or pend.get("reply"), problem.who or pend.get("who")
    how = f"{reply or 'answered'}" + (f" by {who}" if who else "")
    at = problem.answered_at or pend.get("at")
    when = f" at {at}" if at else ""
    return answer_mail(settings, str(head.get("Message-ID") or "") or None, str(head.get("Subject") or ""),
                       f"{problem.code} was already answered ({how}{when}) while this mail was on its way: "
                       "no reply is needed.")
