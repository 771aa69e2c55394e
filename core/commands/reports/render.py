"""A job's timeline (core/queries/timeline.py) as a report: JSON, Markdown, or one HTML page.

Every string from the log was made inert and redacted by the model; here it is escaped for the
format it lands in (HTML entities; Markdown's table pipes and backticks), so a worker's `<script>`
is text on the page, never markup.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.timeline import STATE_WORDS
from pilothouse.core.queries.timeline_view import sums

if TYPE_CHECKING:
    from datetime import datetime

    from pilothouse.core.queries.timeline import Timeline

# nothing may load: no script, no fetch, no image or font from anywhere; inline styles and SVG only
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


def as_json(tl: Timeline) -> dict[str, Any]:
    out = tl.model_dump(mode="json")
    out["by_role"] = sums(tl, "role")
    out["by_provider"] = sums(tl, "provider")
    out["cost_label"] = _cost_label(tl)
    return out


def _tokens(n: int | None, usage: str | None) -> str:
    from pilothouse.providers.usage import tokens_text

    return tokens_text(n, usage)


def _clock(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "—"


def _dur(seconds: float | None) -> str:
    from pilothouse.core.queries.task_figures import duration_text

    return duration_text(seconds)


def _cost(cost_usd: float | None, label: str) -> str:
    from pilothouse.providers.usage import cost_text

    return cost_text(cost_usd, label)


def _span(tl: Timeline) -> float | None:
    return (tl.end - tl.start).total_seconds() if tl.start and tl.end else None


def sections(tl: Timeline) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's tables, the same for Markdown and HTML: (title, headers, rows of plain text)."""
    # attempts and elapsed as `job status` and replay have them (core/queries/task_figures.py); every
    # cost with its label, as the total has it: a simulator's $0 says so
    tasks = [[t.task, t.state, t.reason or "", str(t.attempts), _dur(t.elapsed_s), str(t.review_round),
              (t.merged_sha or "")[:10], _tokens(t.tokens, t.usage), _cost(t.cost_usd, t.cost_label)]
             for t in tl.tasks]
    gates = [[g.task or "(job)", g.level or "", g.where or "", "running" if g.passed is None else
              ("passed" if g.passed else "FAILED"), _dur(g.duration_s), _counts(g.counts), g.reason or ""]
             for g in tl.gates]
    reviews = [[r.task or "(job)", str(r.round or ""), r.overall or "", str(r.findings), " / ".join(r.summaries)]
               for r in tl.reviews]
    problems = [[p.code, p.task or "(job)", p.kind or "", p.summary, _clock(p.opened), p.reply or "(open)",
                 p.words or "", p.who or "", _clock(p.answered) if p.answered else "", p.outcome or ""]
                for p in tl.problems]
    roles = [[r["role"], str(r["runs"]), _tokens(r["tokens"], r["usage"]), f"{r['share'] * 100:.0f}%",
              _cost(r["cost_usd"], r["cost_label"])] for r in sums(tl, "role")]
    from pilothouse.providers.registry import labelled

    # a simulator says so wherever it shows: its replies are scripted, not a model's
    providers = [[labelled(str(r["provider"])), str(r["runs"]), _tokens(r["tokens"], r["usage"]),
                  f"{r['share'] * 100:.0f}%", _cost(r["cost_usd"], r["cost_label"])] for r in sums(tl, "provider")]
    return [
        ("Tasks", ["task", "outcome", "why", "attempts", "elapsed", "review rounds", "merged", "tokens", "cost"],
         tasks),
        ("Gate runs", ["task", "level", "where", "result", "took", "tests", "why"], gates),
        ("Review rounds", ["task", "round", "overall", "findings", "summaries"], reviews),
        ("Problems", ["code", "task", "kind", "summary", "opened", "answer", "words", "by", "answered", "outcome"],
         problems),
        ("Tokens and cost by role", ["role", "runs", "tokens", "share", "cost"], roles),
        ("Tokens and cost by provider", ["provider", "runs", "tokens", "share", "cost"], providers),
    ]


def _counts(counts: dict[str, Any] | None) -> str:
    from pilothouse.core.git.gate_counts import counts_text

    return counts_text(counts) if counts else ""


def _cost_label(tl: Timeline) -> str:
    from pilothouse.providers.usage import cost_label

    return cost_label(tl.usage, (r.provider for r in tl.runs))


def summary_lines(tl: Timeline) -> list[str]:
    gate_runs, failed = len(tl.gates), sum(g.passed is False for g in tl.gates)
    return [f"state: {tl.state}",
            f"from {_clock(tl.start)} to {_clock(tl.end)} ({_dur(_span(tl))})",
            f"tasks: {len(tl.tasks)}, done {sum(t.state == 'done' for t in tl.tasks)}",
            f"gate runs: {gate_runs}, failed {failed}; review rounds: {len(tl.reviews)}; problems: {len(tl.problems)}",
            f"{_tokens(tl.tokens, tl.usage)}; cost: {_cost(tl.cost_usd, _cost_label(tl))}",
            f"accepted head: {tl.head or '—'}; shipped commit: {tl.shipped or '— (not shipped)'}"]


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def markdown(tl: Timeline) -> str:
    out = [f"# Job {_md_cell(tl.job)}", ""] + [f"- {_md_cell(line)}" for line in summary_lines(tl)] + [""]
    out += ["## Timeline", "", "| lane | task | state | from | took | run | tokens |", "|---|---|---|---|---|---|---|"]
    for lane in tl.lanes:
        for b in lane.bars:
            took = ((b.end or tl.end) - b.start).total_seconds() if (b.end or tl.end) else None
            out.append("| " + " | ".join(_md_cell(x) for x in (
                lane.label, b.task or "(job)", STATE_WORDS[b.state], _clock(b.start), _dur(took), b.run or "",
                _tokens(b.tokens, b.usage) if b.usage else "")) + " |")
    out += ["", "Marks:", ""] + [f"- {_clock(m.at)} {m.kind.replace('_', ' ')} {_md_cell(m.task or '(job)')}: "
                                 f"{_md_cell(m.text)}" for m in tl.marks] + [""]
    for title, headers, rows in sections(tl):
        out += [f"## {title}", ""]
        if not rows:
            out += ["(none)", ""]
            continue
        out += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows] + [""]
    return "\n".join(out)


def html_page(tl: Timeline) -> str:
    from pilothouse.core.commands.reports.svg import timeline_svg

    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>pilothouse report: {escape(tl.job)}</title>", f"<style>{_STYLE}</style></head><body>",
        f"<h1>Job <code>{escape(tl.job)}</code></h1>", "<ul class=summary>",
        *(f"<li>{escape(line)}</li>" for line in summary_lines(tl)), "</ul>",
        "<h2>Timeline</h2>", timeline_svg(tl), "<h3>Marks</h3><ul class=marks>",
        *(f'<li class="mark {m.kind}">{escape(_clock(m.at))} <b>{escape(m.kind.replace("_", " "))}</b> '
          f"{escape(m.task or '(job)')}: {escape(m.text)}</li>" for m in tl.marks), "</ul>"]
    for title, headers, rows in sections(tl):
        parts.append(f"<h2>{escape(title)}</h2>")
        if not rows:
            parts.append("<p>(none)</p>")
            continue
        parts.append("<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr></thead><tbody>")
        parts += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</tbody></table>")
    parts.append("<footer>made by pilothouse report from the job's event log</footer></body></html>")
    return "\n".join(parts) + "\n"


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;background:#fff}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f3f3f3}code{font-family:ui-monospace,monospace}
svg{max-width:100%;height:auto;border:1px solid #ddd}.legend span{display:inline-block;padding:0 6px;margin-right:4px}
footer{color:#888;margin-top:2em}
"""
