"""The repository picker (`pilothouse view` outside a repository), through the real app."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


async def test_registered_repos_are_listed_and_opened(isolated_home, tmp_path, monkeypatch) -> None:
    from pilothouse.core.commands.view import resolve
    from pilothouse.core.records import repos
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.picker import RepoPicker
    from textual.widgets import OptionList

    alpha, budget = tmp_path / "work" / "alpha", tmp_path / "work" / "budget"
    for path in (alpha, budget):
        path.mkdir(parents=True)
        repos.register_repo(path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)

    layout, choices = resolve(None)
    assert layout is None
    assert [c.root for c in choices] == [alpha.resolve(), budget.resolve()]
    named, _ = resolve("budget")  # `pilothouse view budget`
    assert named.root == budget.resolve()

    app = CockpitApp(None, choices, live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RepoPicker)
        options = app.screen.query_one(OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert "alpha" in prompts[0] and "budget" in prompts[1] and str(budget.name) in prompts[1]
        assert all(not p.startswith("/") for p in prompts)
        await pilot.press("j", "enter")
        await pilot.pause()
        assert app.layout is not None and app.layout.root == budget.resolve()
        assert "budget" in app.status_line().plain
