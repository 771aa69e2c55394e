"""One event as a short phrase for people: `live`, `why`, the MCP tools and the demo print it.

The log is anyone's to edit: an event of a known type with odd values still gets one line."""

from __future__ import annotations

from typing import Any

from pilothouse.core.git.gate_counts import counts_text


def short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(ev: dict[str, Any]) -> str:
    """The event's data as a short phrase; known types get a sentence, the rest key=value."""
    try:
        return _describe_known(ev)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        # the log is anyone's to edit: data of a known type with odd values still gets one line
        return _describe_known({"type": "", "data": ev.get("data")})


def _describe_known(ev: dict[str, Any]) -> str:
    from pilothouse.providers.usage import tokens_text

    t = ev.get("type", "")
    d = ev.get("data") or {}
    if not isinstance(d, dict):
        return short(d)
    reason = d.get("reason")
    if t == "task.state":
        text = f"{d.get('from') or '∅'} → {d.get('to')}"
        return text + (f": {short(reason, 120)}" if reason else "")
    if t == "run.started":
        model = f"/{d['model']}" if d.get("model") else ""
        from pilothouse.providers.registry import labelled

        return f"{d.get('role', 'run')} ({d.get('mode', '?')}) on {labelled(str(d.get('provider', '?')) + model)}" + (
            f", attempt {d['attempt']}" if d.get("attempt") else "") + (
            f", worktree {d.get('checkout') or 'set up'} in {d['worktree_ms']}ms" if d.get("worktree_ms") is not None
            else "")
    if t == "run.finished":
        text = f"{d.get('role', 'run')} {d.get('verdict', '?')}, {tokens_text(d.get('tokens'), d.get('usage'))}"
        if d.get("duration_s") is not None:
            text += f", {d['duration_s']}s"
        said = d.get("reason") or d.get("error")
        return text + (f": {short(said, 140)}" if said else "")
    if t.startswith("problem."):
        parts = [str(d[k]) for k in ("code", "kind") if d.get(k)]
        if d.get("reply"):
            parts.append(f"reply {d['reply']}" + (f" {short(d['words'], 60)}" if d.get("words") else "")
                         + (f" by {d['who']}" if d.get("who") else ""))
        if d.get("summary"):
            parts.append(short(d["summary"], 100))
        if d.get("replies"):
            parts.append("[" + " | ".join(map(str, d["replies"])) + "]")
        return "  ".join(parts)
    if t == "run.activity":
        return f"{d.get('role', 'worker')}: {short(d.get('tool') or d.get('activity') or '…', 100)}"
    if t == "gate.started":
        where = f" in {d['where']}" if d.get("where") else ""
        return f"gate {d.get('level', '?')}{where}" + (f": {short(d['command'], 80)}" if d.get("command") else "")
    if t == "run.usage":
        tok = d.get("tokens")
        total = sum(v for v in tok.values() if isinstance(v, int | float)) if isinstance(tok, dict) else tok
        return tokens_text(total, d.get("usage")) + (" (final)" if d.get("final") else " so far")
    if t == "gate.finished":
        verdict = "passed" if d.get("passed") else "FAILED"
        where = f" in {d['where']}" if d.get("where") else ""
        took = f" ({d['duration_s']}s)" if d.get("duration_s") is not None else ""
        # its end is what tells interpreters apart (which venv, which Python): a long path loses its start
        tool = str(d.get("toolchain") or "")
        ran = f" [ran {tool if len(tool) <= 140 else '…' + tool[-139:]}]" if tool else ""
        counts = d.get("counts")
        counted = f" {counts_text(counts)}" if isinstance(counts, dict) else \
            " no counts (weakened-test count checks off)" if d.get("counts_off") else ""
        code = f" exit {d['exit_code']}" if d.get("exit_code") not in (None, 0) else ""
        return f"gate {d.get('level', '?')}{where} {verdict}{code}{took}{counted}{ran}" + (
            f": {short(reason, 120)}" if reason and not d.get("passed") else "")
    if t == "merge.finished":
        if d.get("ok"):
            sha = str(d.get("merged_sha") or "")[:10]
            return f"merged {sha}" + (" (already merged)" if d.get("already_merged") else "")
        return f"merge failed: {short(reason or '?', 120)}"
    if t == "review.finished":
        text = f"review round {d.get('round', '?')}: {d.get('overall') or 'no verdict'}"
        if d.get("findings"):
            text += f", {d['findings']} finding(s)"
            if d.get("summaries"):
                text += f": {short(d['summaries'][0], 80)}"
        return text
    keys = [k for k in d if k != "reason" and d[k] is not None and not isinstance(d[k], dict | list)]
    text = " ".join(f"{k}={short(d[k], 40)}" for k in keys[:6])
    if reason:
        text = f"{short(reason, 120)}" + (f"  ({text})" if text else "")
    return text
