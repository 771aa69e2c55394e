"""How the cockpit writes numbers, times, bars and events: compact enough for 80 columns."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from pilothouse.core.state.events import parse_ts
from pilothouse.providers.untrusted import inert
from rich.text import Text

# rich styles (Text objects cannot resolve Textual variables)
_RICH_STATE = {
    "running": "bold cyan", "gating": "bold cyan", "reviewing": "bold cyan", "merging": "bold cyan",
    "planning": "bold cyan", "done": "green", "accepted": "bold green", "shipped": "green", "approved": "green",
    "new": "italic", "waiting": "yellow", "blocked": "bold red", "stopped": "bold red", "failed": "bold red",
    "needs_replan": "yellow", "skipped": "dim", "cancelled": "dim", "planned": "dim", "created": "dim",
}

REPLY_KEYS = {"retry": "r", "accept": "a", "skip": "s", "dismiss": "d", "hint": "h", "plan": "p"}


def styled(text: str, style: str = "") -> Text:
    """Styled text that stays styled only where it is: `Text(x, style=s) + more` would give its
    style to everything appended after it."""
    return Text().append(text, style or None)


def provider_text(key: str) -> Text:
    """A provider's name; the loopback simulator is always labelled as such."""
    text = Text(key)
    if key == "sim" or key.startswith("sim-"):
        text.append(" (simulated)", style="italic dim")
    return text


def state_text(state: str) -> Text:
    return Text(state, style=_RICH_STATE.get(state, ""))


def tokens(n: int | None, usage: str | None = None) -> str:
    """A token count in a column: `~` marks an estimate, `?` a count nobody reported (`≥` when part
    was) — never a 0 for tokens the server did not report (providers/usage.py)."""
    if usage == "unknown":
        return f"≥{tokens(n)}" if n else "?"
    mark = "~" if usage == "estimated" else ""
    if not n:
        return mark + "0"
    if n < 1000:
        return f"{mark}{n}"
    if n < 1_000_000:
        return f"{mark}{n / 1000:.1f}k"
    return f"{mark}{n / 1_000_000:.2f}M"


def usage_label(totals: dict[str, int]) -> str:
    """The usage label of a run log's running totals (activity_text keeps its turn counts)."""
    if totals.get("turns_unknown"):
        return "unknown"
    return "estimated" if totals.get("turns_estimated") else "measured"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def elapsed(start: str | None, end: str | None, now: datetime) -> str:
    t0 = parse_ts(start)
    if t0 is None:
        return ""
    t1 = parse_ts(end) or now
    return duration((t1 - t0).total_seconds())


Spans = Iterable[tuple[str, str | None]]


def _spans(spans: Spans, now: datetime) -> list[tuple[float, float | None]]:
    """The stored (start, end) stamps as seconds; a span still going ends now."""
    out: list[tuple[float, float | None]] = []
    for start, end in spans:
        a = parse_ts(start)
        if a is not None:
            out.append((a.timestamp(), (parse_ts(end) or now).timestamp()))
    return out


def worked(start: str | None, end: str | None, now: datetime, pauses: Spans = (), busy: Spans = ()) -> str:
    """Elapsed from `start` to `end` (None: now) less the time spent waiting for the operator:
    `pauses` (a problem's opened/closed times) except where `busy` (a worker ran meanwhile). The
    arithmetic is core's (core/queries/task_figures.py), the one `job status`, replay and the report use."""
    from pilothouse.core.queries.task_figures import worked_seconds

    t0 = parse_ts(start)
    if t0 is None:
        return ""
    t1 = parse_ts(end) or now
    return duration(worked_seconds(t0.timestamp(), t1.timestamp(), _spans(pauses, now), _spans(busy, now)))


def countdown(at: str | None, now: datetime) -> str:
    t = parse_ts(at)
    if t is None:
        return "—"
    secs = (t - now).total_seconds()
    return "now" if secs <= 0 else duration(secs)


def bar(pct: float | None, width: int = 10, blocked: bool = False) -> Text:
    if pct is None:
        return Text("?".center(width, "·"), style="dim")
    pct = max(0.0, min(100.0, pct))
    full = round(pct / 100 * width)
    style = "red" if blocked or pct >= 90 else "yellow" if pct >= 70 else "green"
    return styled("█" * full, style) + Text("░" * (width - full), style="dim")


def clock(ts: str | None) -> str:
    """HH:MM:SS of an event's UTC timestamp."""
    if not ts:
        return "--:--:--"
    t = parse_ts(ts)
    return t.strftime("%H:%M:%S") if t else ts[:8]


def tilde(path: str | Path | None) -> str:
    if not path:
        return ""
    p = str(path)
    home = str(Path.home())
    return "~" + p[len(home):] if p == home or p.startswith(home + "/") else p


def _short(value: Any, width: int = 90) -> str:
    from pilothouse.core.queries.describe import short

    return short(value, width)


def describe(ev: dict[str, Any]) -> str:
    """What an event says, in a few words (the cockpit's own wording of the types in docs/contracts.md)."""
    try:
        return _describe_known(ev)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        # the log is anyone's to edit: odd values in a known type's data still make one line
        return _describe_known({"type": "", "data": ev.get("data")})


def _describe_known(ev: dict[str, Any]) -> str:
    etype = str(ev.get("type", ""))
    d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    d = d or {}
    reason = _short(d["reason"]) if d.get("reason") else ""
    if etype == "task.state":
        arrow = f"{d.get('from') or '∅'} → {d.get('to')}"
        return f"{arrow}  {reason}".rstrip()
    if etype == "gate.finished":
        verdict = "passed" if d.get("passed") else "failed"
        where = f" in {d['where']}" if d.get("where") == "integration" else ""
        return f"{d.get('level') or d.get('gate') or 'gate'}{where} {verdict}  {reason}".rstrip()
    if etype == "gate.started":
        return f"{d.get('level', '')} in {d.get('where', 'worktree')}"
    if etype == "merge.finished":
        if d.get("ok") is False:
            return f"failed  {reason}".rstrip()
        return f"merged {str(d.get('sha') or d.get('merged') or '')[:10]}".rstrip()
    if etype == "review.finished":
        return f"round {d.get('round', '?')}: {d.get('overall')}  {d.get('findings', '')} finding(s)"
    if etype == "run.started":
        return " ".join(str(d[k]) for k in ("role", "mode", "provider", "model") if d.get(k))
    if etype == "run.finished":
        tok = d.get("tokens")
        total = sum(v for v in tok.values() if isinstance(v, int)) if isinstance(tok, dict) else tok
        shown = tokens(total, d.get("usage")) + " tok" if total or d.get("usage") == "unknown" else ""
        text = f"{d.get('verdict', '')}  {shown}".rstrip()
        return text + (f"  {_short(d['reason'], 80)}" if d.get("reason") else "")
    if etype == "run.activity":
        return str(d.get("tool") or d.get("activity") or "")
    if etype == "run.usage":
        tok = d.get("tokens")
        if isinstance(tok, dict):
            usage = d.get("usage")
            return f"{tokens(tok.get('input'), usage)} in / {tokens(tok.get('output'), usage)} out"
        return "? tok" if d.get("usage") == "unknown" else ""
    if etype.startswith("problem."):
        what = d.get("reply") or d.get("kind") or d.get("outcome") or ""
        words = f" “{_short(d['words'], 40)}”" if d.get("words") else ""
        return f"{d.get('code', '')} {what}{words}  {_short(d.get('summary') or '', 60)}".rstrip()
    if etype == "quota.changed":
        pct = d.get("used_pct")
        return " ".join(x for x in (str(d.get("provider") or ""), str(d.get("window") or ""),
                                     f"{pct}%" if pct is not None else "",
                                     "blocked" if d.get("blocked") else "") if x)
    parts = [reason] if reason else []
    for k in ("state", "revision", "tasks", "verdict", "code", "summary"):
        if d.get(k) not in (None, "", [], {}) and k != "reason":
            parts.append(f"{k}={_short(d[k], 40)}")
    return "  ".join(parts)


def words(value: object) -> str:
    """A worker-written value for one line of the cockpit: inert (providers/untrusted.py)."""
    return inert(value, lines=False)


_FAMILY_STYLE = {"problem": "bold red", "job": "bold", "quota": "yellow", "gate": "magenta",
                 "review": "magenta", "merge": "green", "supervisor": "dim", "run": "cyan"}
_TYPE_STYLE = {"problem.answered": "yellow", "problem.closed": "green", "job.accepted": "bold green",
               "job.failed": "bold red", "job.blocked": "bold yellow", "budget.exceeded": "bold red"}


def event_style(ev: dict[str, Any]) -> str:
    """An event's colour by its outcome, not its family: a passed gate green and a failed one red, a
    problem red only while it is open, a quota window yellow only while it blocks."""
    etype = str(ev.get("type", "?"))
    d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    d = d or {}
    if etype == "gate.finished":
        return "green" if d.get("passed") else "bold red"
    if etype == "merge.finished" and d.get("ok") is False:
        return "bold red"
    if etype == "review.finished":
        overall = str(d.get("overall") or "").upper()
        return "green" if overall == "PASS" else "yellow" if overall == "CHANGES" else "red" if overall else "magenta"
    if etype == "quota.changed":
        pct = d.get("used_pct")
        full = d.get("blocked") or (isinstance(pct, int | float) and pct >= 100)
        return "yellow" if full else "green" if d.get("blocked") is False else ""
    if etype == "run.finished" and d.get("verdict") not in (None, "completed"):
        return "red"
    return _TYPE_STYLE.get(etype) or _FAMILY_STYLE.get(etype.split(".", 1)[0], "")


def event_text(ev: dict[str, Any]) -> Text:
    etype = str(ev.get("type", "?"))
    noun = etype.split(".", 1)[0]
    style = event_style(ev)
    where = words("/".join(str(x) for x in (ev.get("job"), ev.get("task")) if x))
    line = styled(clock(ev.get("ts")), "dim") + " " + Text(f"{etype:<16}", style=style)
    if where:
        line += Text(f" {where}")
    brief = words(describe(ev))
    if brief:
        line += Text(f"  {brief}", style="dim" if noun == "run" else "")
    return line


def event_matches(ev: dict[str, Any], needle: str) -> bool:
    if not needle:
        return True
    hay = " ".join(str(ev.get(k) or "") for k in ("type", "job", "task", "run"))
    hay += " " + str(ev.get("data") or "")
    return needle.lower() in hay.lower()


def activity_text(ev: dict[str, Any], totals: dict[str, int]) -> Text | None:
    """One line of a worker's normalised run stream (providers/contract.py events)."""
    try:
        return _activity_text(ev, totals)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        # the stream is the worker's to write: a line with odd values is shown raw, never fatal
        return styled(words(_short(ev, 200)), "dim")


def _activity_text(ev: dict[str, Any], totals: dict[str, int]) -> Text | None:
    kind = ev.get("kind")
    ts = styled(clock(ev.get("ts")) + " ", "dim")
    if kind == "tool":
        status = str(ev.get("status", ""))
        mark = {"started": "▶", "ok": "✓", "error": "✗", "denied": "⊘"}.get(status, "·")
        style = {"error": "red", "denied": "red", "ok": "green"}.get(status, "cyan")
        return ts + Text(f"{mark} {words(ev.get('name', ''))}", style=style) + Text(f" {words(ev.get('brief', ''))}")
    if kind in ("text", "reasoning"):
        body = " ".join(words(ev.get("text", "")).split())
        if not body:
            return None
        return ts + Text(body, style="italic dim" if kind == "reasoning" else "")
    if kind == "usage":
        for k in ("input", "output", "reasoning"):
            totals[k] = totals.get(k, 0) + int(ev.get(k) or 0)
        source = str(ev.get("source"))
        how = {"estimated": " (estimated)", "unknown": " (not reported)"}.get(source, "")
        if how:  # the totals are then no longer all measured: usage_label(totals) says how far to trust them
            totals[f"turns_{source}"] = totals.get(f"turns_{source}", 0) + 1
        label = usage_label(totals)
        return ts + Text(f"usage +{ev.get('input', 0)} in / +{ev.get('output', 0)} out{how}  "
                         f"(total {tokens(totals.get('input', 0), label)} in, "
                         f"{tokens(totals.get('output', 0), label)} out)", style="dim")
    if kind == "quota":
        return ts + Text(words(f"quota {ev.get('window')} {ev.get('used_pct')}% resets {ev.get('resets_at')}"),
                         style="yellow")
    if kind == "error":
        return ts + Text(words(f"error ({ev.get('error_class')}): {ev.get('message')}"), style="bold red")
    if kind == "session":
        return ts + Text(words(f"session {ev.get('id')}"), style="dim")
    return None
