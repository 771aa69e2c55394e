"""Usage and cost (`$`): tokens and money per provider, per job (its budget as a bar) and per task of
the selected job, from what each run recorded (core/queries/usage.py); live as runs report.

Money is each provider's prices applied by dispatch; the simulator's runs cost nothing and are
labelled as simulated, so a rehearsal never reads as real spend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pilothouse.tui import format as fmt
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

if TYPE_CHECKING:
    from pilothouse.core.queries.usage import Usage
    from pilothouse.tui.app import CockpitApp


def money(usage: Usage, provider: bool = False) -> Text:
    """A row's cost; a provider's, a job's or a task's made by the simulator says so (core's cost_label,
    as the report and `pilothouse usage` have it), all of it or in part."""
    from pilothouse.providers.usage import cost_label

    label = cost_label(None, (usage.key,) if provider else usage.providers)
    if label == "simulator":
        return Text("$0 (simulated)", style="italic dim")
    cost = usage.cost_usd
    text = f"${cost:.4f}" if 0 < cost < 0.01 else f"${cost:,.2f}"
    return Text(text + (" part sim" if label.endswith("part simulator") else ""))


def _cells(u: Usage, name: Cell, provider: bool = False) -> dict[str, Cell]:
    runs = f"{u.runs}" + (f" ({u.running} going)" if u.running else "")
    return {"name": name, "runs": runs, "tokens": fmt.tokens(u.tokens), "cost": money(u, provider)}


class ProviderUsage(KeyedTable):
    COLUMNS = (Col("name", "provider", 18, flex=1, fit=True), Col("runs", "runs", 12), Col("tokens", "tokens", 7),
               Col("cost", "cost", 15))


class JobUsage(KeyedTable):
    COLUMNS = (Col("name", "job", 12, flex=1, fit=True), Col("runs", "runs", 12), Col("tokens", "tokens", 7),
               Col("cost", "cost", 15), Col("budget", "budget (job_tokens)", 23, flex=1))


class TaskUsage(KeyedTable):
    COLUMNS = (Col("name", "task", 14, flex=1, fit=True), Col("runs", "runs", 12), Col("tokens", "tokens", 7),
               Col("cost", "cost", 15))


def budget_cell(used: int, cap: int | None) -> Cell:
    if cap is None:
        return Text("no budget set", style="dim")
    pct = 100.0 * used / cap if cap else 100.0
    return fmt.bar(pct, 8, blocked=used >= cap) + Text(f" {pct:3.0f}% of {fmt.tokens(cap)}")


class UsageScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="usage.back"),
    ]

    def __init__(self, job: str | None) -> None:
        super().__init__()
        self.job = job

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="usage-head")
        yield ProviderUsage(id="usage-providers", classes="panel")
        yield JobUsage(id="usage-jobs", classes="panel")
        yield TaskUsage(id="usage-tasks", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#usage-providers").border_title = "per provider"
        self.query_one("#usage-jobs").border_title = "per job"
        self.query_one("#usage-tasks").border_title = f"per task · {self.job}" if self.job else "per task"
        self.refresh_usage()
        self.query_one("#usage-jobs").focus()

    def refresh_usage(self) -> None:
        from pilothouse.core.queries import usage

        q = self.cockpit.queries
        layout = self.cockpit.layout
        if q is None or layout is None:
            return
        providers = usage.by_provider(q)
        self.query_one(ProviderUsage).set_rows([(u.key, _cells(u, fmt.provider_text(u.key), provider=True))
                                              for u in providers])
        cap = self._cap()
        rows: list[tuple[str, dict[str, Cell]]] = []
        jobs = {j.job: j for j in q.jobs()}
        for u in usage.by_job(q):
            used = max(u.tokens, jobs[u.key].tokens if u.key in jobs else 0)  # as the budget counts them
            rows.append((u.key, {**_cells(u, u.key), "budget": budget_cell(used, cap)}))
        self.query_one(JobUsage).set_rows(rows)
        tasks = usage.by_task(q, self.job) if self.job else []
        self.query_one(TaskUsage).set_rows([(u.key, _cells(u, u.key)) for u in tasks])
        total = sum(u.cost_usd for u in providers if not u.simulated)
        head = Text("usage and cost", style="bold") + Text(f"   {fmt.tokens(sum(u.tokens for u in providers))} "
                                                           f"tokens · ${total:,.2f} spent", style="")
        if any(u.simulated for u in providers):
            head.append("   (simulated runs cost nothing)", style="italic dim")
        self.query_one("#usage-head", Static).update(head)

    def _cap(self) -> int | None:
        from pilothouse.core.records.project import job_token_cap
        from pilothouse.providers.errors import UserError

        layout = self.cockpit.layout
        try:
            return job_token_cap(layout) if layout is not None else None
        except UserError:
            return None  # the status line already says the project file is broken

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        if any(str(e.get("type", "")).startswith(("run.", "budget.")) for e in events):
            self.refresh_usage()
