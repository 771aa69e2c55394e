"""Usage and cost (`$`), through the real app against a real state.db, live as runs finish."""

from __future__ import annotations

import pytest
from pilothouse.core.state.events import EventLog
from pilothouse.core.state.store import connect

pytestmark = pytest.mark.anyio


async def test_usage_sums_runs_labels_the_sim_and_shows_the_budget_live(cockpit_repo, make_app, wait_for) -> None:
    cockpit_repo.project_yaml.write_text(cockpit_repo.project_yaml.read_text() + "budgets:\n  job_tokens: 100000\n")
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("dollar_sign")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "UsageScreen")
        screen = app.screen
        providers, jobs, tasks = (screen.query_one(f"#usage-{n}") for n in ("providers", "jobs", "tasks"))
        cell = lambda table, key, col: str(table.get_cell(key, col))  # noqa: E731
        assert cell(providers, "sim", "cost") == "$0 (simulated)" and cell(providers, "sim", "tokens") == "46.6k"
        assert cell(providers, "sim", "runs") == "4 (1 going)"
        assert cell(tasks, "calendar-store", "tokens") == "11.2k"  # its builder and its reviewer
        assert "47%" in cell(jobs, "first-draft", "budget")  # 46.6k of the runs vs 44.5k recorded: the larger
        db = connect(cockpit_repo.state_db)
        db.execute("INSERT INTO runs (run_id, job, task, role, provider, model, mode, attempt, state, tokens, "
                   "cost_usd, started_at, finished_at) VALUES ('r-claude', 'first-draft', 'calendar-api', "
                   "'reviewer', 'claude', 'sonnet', 'review', 1, 'finished', 50000, 1.25, "
                   "'2026-11-29T07:29:00.000Z', '2026-11-29T07:29:30.000Z')")
        db.close()
        EventLog(cockpit_repo.events).append("run.finished", job="first-draft", task="calendar-api", run="r-claude",
                                             data={"verdict": "completed"})
        await wait_for(pilot, lambda: "claude" in providers.rows)
        assert cell(providers, "claude", "cost") == "$1.25"
        assert "97%" in cell(jobs, "first-draft", "budget")
        assert "$1.25 spent" in str(screen.query_one("#usage-head").render())
        await pilot.press("escape")
        assert app.screen is app.dashboard
