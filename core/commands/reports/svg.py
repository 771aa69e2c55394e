"""The timeline as inline SVG for the HTML report: one row per lane, a bar per state, marks above,
a time axis scaled to the job. Plain shapes and <title> tooltips: nothing to load, nothing to run."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from pilothouse.core.queries.timeline import STATE_WORDS, STATES

if TYPE_CHECKING:
    from pilothouse.core.queries.timeline import Timeline

# the cockpit's colours for the same states (tui/cockpit.tcss), so the picture reads the same in both
COLOURS = {"planning": "#8e7cc3", "building": "#3d85c6", "gating": "#e69138", "reviewing": "#6aa84f",
           "merging": "#45818e", "waiting_operator": "#cc0000", "waiting_quota": "#bf9000"}
MARK_COLOURS = {"problem_opened": "#cc0000", "problem_answered": "#38761d", "gate_failed": "#e69138",
                "merge": "#134f5c", "merge_rolled_back": "#741b47", "quota_wait": "#bf9000"}
_LABEL_W, _WIDTH, _ROW, _TOP = 140, 1000, 22, 30


def _ticks(span: float) -> float:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400):
        if span / step <= 10:
            return float(step)
    return 86400.0 * max(1, round(span / 86400 / 10))


def _label(seconds: float) -> str:
    s = int(seconds)
    return f"{s}s" if s < 120 else (f"{s // 60}m" if s < 7200 else f"{s // 3600}h{(s % 3600) // 60:02d}")


def timeline_svg(tl: Timeline) -> str:
    if tl.start is None or tl.end is None:
        return "<p>(no events yet)</p>"
    t0 = tl.start.timestamp()
    span = max(tl.end.timestamp() - t0, 1e-3)
    scale = (_WIDTH - _LABEL_W - 10) / span

    def x(at: float) -> float:
        return _LABEL_W + (at - t0) * scale

    rows = len(tl.lanes)
    height = _TOP + rows * _ROW + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
           f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="timeline of job {escape(tl.job)}" '
           'font-family="sans-serif" font-size="11">']
    step = _ticks(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = x(t0 + tick)
        out.append(f'<line x1="{tx:.1f}" y1="{_TOP - 4}" x2="{tx:.1f}" y2="{_TOP + rows * _ROW}" stroke="#eee"/>')
        out.append(f'<text x="{tx:.1f}" y="{_TOP + rows * _ROW + 14}" text-anchor="middle" fill="#666">'
                   f"{_label(tick)}</text>")
        tick += step
    end = tl.end.timestamp()
    for i, lane in enumerate(tl.lanes):
        y = _TOP + i * _ROW
        out.append(f'<text x="4" y="{y + 15}" fill="#333">{escape(lane.label[:22])}</text>')
        shown: str | None = None
        for b in lane.bars:
            b0, b1 = b.start.timestamp(), (b.end.timestamp() if b.end else end)
            w = max((b1 - b0) * scale, 1.0)
            tip = f"{b.task or '(job)'}: {STATE_WORDS[b.state]} {b1 - b0:.1f}s"
            if b.run:
                tip += f", run {b.run} ({b.role or '?'} on {b.provider or '?'})"
            if b.usage:
                from pilothouse.providers.usage import tokens_text

                tip += f", {tokens_text(b.tokens, b.usage)}"
            out.append(f'<rect class="bar {b.state}" x="{x(b0):.1f}" y="{y + 3}" width="{w:.1f}" height="{_ROW - 6}" '
                       f'fill="{COLOURS[b.state]}"><title>{escape(tip)}</title></rect>')
            name = b.task or "(job)"
            if name != shown and w > 7 * len(name) + 6:  # a task's name on its first bar that has room
                out.append(f'<text x="{x(b0) + 3:.1f}" y="{y + 15}" fill="#fff">{escape(name)}</text>')
                shown = name
    lane_row = {lane.key: i for i, lane in enumerate(tl.lanes)}
    for m in tl.marks:
        mx = x(m.at.timestamp())
        row = lane_row.get(m.lane or "", None)
        y = _TOP + (row if row is not None else 0) * _ROW
        out.append(f'<path class="mark {m.kind}" d="M{mx:.1f},{y} l-4,-6 h8 z" fill="{MARK_COLOURS[m.kind]}">'
                   f"<title>{escape(m.kind.replace('_', ' '))} {escape(m.task or '(job)')}: {escape(m.text)}"
                   "</title></path>")
    lx = _LABEL_W
    for state in STATES:
        out.append(f'<rect x="{lx}" y="6" width="10" height="10" fill="{COLOURS[state]}"/>'
                   f'<text x="{lx + 13}" y="15" fill="#333">{STATE_WORDS[state]}</text>')
        lx += 20 + 6 * len(STATE_WORDS[state])
    out.append("</svg>")
    return "\n".join(out)
