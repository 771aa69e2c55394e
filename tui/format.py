"""How the cockpit writes numbers, times, bars and events: compact enough for 80 columns."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from rich.text import Text

from pilothouse.core.queries import parse_ts

STATE_STYLE = {
    "running": "bold $accent", "gating": "bold $accent", "reviewing": "bold $accent",
    "merging": "bold $accent", "planning": "bold $accent",
    "done": "$success", "accepted": "bold $success", "approved": "$success",
    "ready": "$foreground", "planned": "$text-muted", "created": "$text-muted",
    "waiting": "$warning", "blocked": "bold $error", "stopped": "bold $error", "failed": "bold $error",
    "needs_replan": "$warning", "skipped": "$text-muted", "cancelled": "$text-muted",
}
# rich styles (Text objects cannot resolve Textual variables)
_RICH_STATE = {
    "running": "bold cyan", "gating": "bold cyan", "reviewing": "bold cyan", "merging": "bold cyan",
    "planning": "bold cyan", "done": "green", "accepted": "bold green", "approved": "green",
    "waiting": "yellow", "blocked": "bold red", "stopped": "bold red", "failed": "bold red",
    "needs_replan": "yellow", "skipped": "dim", "cancelled": "dim", "planned": "dim", "created": "dim",
}

REPLY_KEYS = {"retry": "r", "accept": "a", "skip": "s", "dismiss": "d", "hint": "h", "plan": "p"}


def state_text(state: str) -> Text:
    return Text(state, style=_RICH_STATE.get(state, ""))


def tokens(n: int | None) -> str:
    if not n:
        return "0"
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


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
    return Text("█" * full, style=style) + Text("░" * (width - full), style="dim")


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


def _brief(data: dict[str, Any]) -> str:
    """The few data fields worth a glance, in a stable order."""
    keys = ("state", "from", "to", "reason", "tool", "activity", "verdict", "gate", "exit_code",
            "overall", "reply", "words", "code", "summary", "window", "used_pct", "tokens", "revision")
    parts = []
    for k in keys:
        if k in data and data[k] not in (None, "", [], {}):
            v = data[k]
            parts.append(f"{k}={v}" if k not in ("state", "summary", "reason", "activity") else str(v))
    return " ".join(parts)


def event_text(ev: dict[str, Any]) -> Text:
    etype = str(ev.get("type", "?"))
    noun = etype.split(".", 1)[0]
    style = {"problem": "bold red", "job": "bold", "quota": "yellow", "gate": "magenta",
             "review": "magenta", "merge": "green", "supervisor": "dim", "run": "cyan"}.get(noun, "")
    where = "/".join(str(x) for x in (ev.get("job"), ev.get("task")) if x)
    data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    line = Text(clock(ev.get("ts")), style="dim") + " " + Text(f"{etype:<16}", style=style)
    if where:
        line += Text(f" {where}")
    brief = _brief(data or {})
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
    kind = ev.get("kind")
    ts = Text(clock(ev.get("ts")) + " ", style="dim")
    if kind == "tool":
        status = str(ev.get("status", ""))
        mark = {"started": "▶", "ok": "✓", "error": "✗", "denied": "⊘"}.get(status, "·")
        style = {"error": "red", "denied": "red", "ok": "green"}.get(status, "cyan")
        return ts + Text(f"{mark} {ev.get('name', '')}", style=style) + Text(f" {ev.get('brief', '')}")
    if kind in ("text", "reasoning"):
        body = " ".join(str(ev.get("text", "")).split())
        if not body:
            return None
        return ts + Text(body, style="italic dim" if kind == "reasoning" else "")
    if kind == "usage":
        for k in ("input", "output", "reasoning"):
            totals[k] = totals.get(k, 0) + int(ev.get(k) or 0)
        return ts + Text(f"usage +{ev.get('input', 0)} in / +{ev.get('output', 0)} out  "
                         f"(total {tokens(totals.get('input', 0))} in, {tokens(totals.get('output', 0))} out)",
                         style="dim")
    if kind == "quota":
        return ts + Text(f"quota {ev.get('window')} {ev.get('used_pct')}% resets {ev.get('resets_at')}",
                         style="yellow")
    if kind == "error":
        return ts + Text(f"error ({ev.get('error_class')}): {ev.get('message')}", style="bold red")
    if kind == "session":
        return ts + Text(f"session {ev.get('id')}", style="dim")
    return None
