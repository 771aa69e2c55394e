"""The dashboard's tables, through the real app against a real state.db."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_problems_name_their_job(cockpit_repo, make_app, size) -> None:
    from pilothouse.core.stops import problems

    other = problems.open_problem(cockpit_repo, "hello-world", "calendar-ui", "gate_failed",
                                  "The fast gate failed twice.")  # the same task name, another job
    app = make_app(cockpit_repo)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.dashboard.problems
        assert "job" in [key for key, _ in table._layout]
        rows = {code: [str(c) for c in table.get_row(code)] for code in (other.code, "KTRWMB")}
        assert "hello-world" in rows[other.code] and "first-draft" in rows["KTRWMB"]
        assert rows[other.code] != rows["KTRWMB"]


async def test_status_line_keeps_help_when_a_problem_waits_at_80(cockpit_repo, make_app) -> None:
    from test_events_panel import screen_text

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first = screen_text(app).strip("\n").splitlines()
        top = next(line for line in first if "pilothouse" in line and "problem waiting" in line)
        assert "? help" in top


async def test_a_provider_whose_model_failed_the_probe_is_marked_in_the_providers_panel(cockpit_repo, make_app,
                                                                                         cli, tmp_path) -> None:
    scenario = tmp_path / "forced-only.yaml"
    scenario.write_text("name: forced-only\ndescription: tool calls only when forced\nscripts:\n"
                        "  - match: {contains: ['pilothouse capability probe: tool call (forced)']}\n"
                        "    turns: [{actions: [{read: {path: README.md}}]}]\n"
                        "  - match: {contains: ['pilothouse capability probe: result block']}\n"
                        "    turns: [{say: '<!--RESULT-->{\"probe\": \"ok\"}<!--/RESULT-->'}]\n"
                        "  - turns: [{say: OK}]\n")
    assert cli("providers", "check", "sim", "--scenario", str(scenario), cwd=tmp_path).returncode == 0
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.dashboard.providers
        cells = {key: str(table.get_row(key)[0]) for key in ("sim\tfive_hour", "sim-b\tfive_hour")}
        assert cells["sim\tfive_hour"] == "● sim (simulated) ✗tools", cells
        assert "✗" not in cells["sim-b\tfive_hour"]  # never probed: no mark
