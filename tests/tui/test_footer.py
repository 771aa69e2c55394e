"""The key footer is rebuilt when the keys on offer change, and only then."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


def _keys(app) -> list:
    from textual.widgets._footer import FooterKey

    return list(app.screen.query(FooterKey))


async def test_a_panel_jump_that_offers_the_same_keys_keeps_the_footer(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("5")  # the event log: no reply keys
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "events")
        await pilot.pause()
        before = _keys(app)
        assert before
        await pilot.press("2")  # Providers: the same keys
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "providers-table")
        await pilot.pause()
        assert _keys(app) == before and all(key.is_attached for key in before)


async def test_the_footer_follows_the_keys_that_change(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        assert "Retry" not in [str(k.description) for k in _keys(app)]
        await pilot.press("4")  # Problems: KTRWMB (a failed gate) is highlighted, its replies are offered
        await wait_for(pilot, lambda: "Retry" in [str(k.description) for k in _keys(app)])
        await pilot.press("5")
        await wait_for(pilot, lambda: "Retry" not in [str(k.description) for k in _keys(app)])


async def test_rebuilt_keys_are_let_go(cockpit_repo, make_app, wait_for) -> None:
    """Textual keeps every key widget a footer ever built (its data_bind watcher) until the footer's
    `compact` changes, which it never does: each rebuild added its keys to what every full garbage
    collection walked, slower the longer the cockpit ran. The old keys go with the rebuild."""
    import gc

    from textual.widgets._footer import FooterKey

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is FooterKey)

    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for _ in range(12):  # Problems offers the reply keys, the event log none: a rebuild each
            await pilot.press("4")
            await wait_for(pilot, lambda: "Retry" in [str(k.description) for k in _keys(app)])
            await pilot.press("5")
            await wait_for(pilot, lambda: "Retry" not in [str(k.description) for k in _keys(app)])
        shown = len(_keys(app))
        assert alive() <= 2 * shown + 10, (alive(), shown)  # this rebuild's and the last one's, not 24 of them


def _cut(app) -> tuple[list[str], set[str]]:
    """The keys the footer cuts at its right edge (or at the palette's key), and all it shows."""
    footer = app.screen.query_one("SteadyFooter")
    palette = [w.region.x for w in footer.query("FooterKey") if w.key == "ctrl+p"]
    right = min(palette) if palette else footer.region.right
    keys = [k for k in _keys(app) if k.key != "ctrl+p"]
    return [str(k.description) for k in keys if k.region.width == 0 or k.region.right > right], \
        {str(k.description) for k in keys}


@pytest.mark.parametrize("remapped", [False, True])
async def test_the_reply_keys_fit_the_80_column_footer_remapped_keys_too(cockpit_repo, make_app, wait_for,
                                                                         remapped) -> None:
    """On a stopped problem at 80 columns (the most keys on offer) the footer is compact: every key is
    whole with the default keys, and the replies are whole with longer remapped ones (f2, ctrl+o)."""
    from test_keymap import _write

    if remapped:
        _write("keys:\n  problem.retry: R\n  problem.hint: f2\n  app.help: f1\n  supervisor.toggle: ctrl+o\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await wait_for(pilot, lambda: any("Retry" in str(k.description) for k in _keys(app)))
        await pilot.pause()
        cut, shown = _cut(app)
        assert shown >= {"Retry", "Accept", "Skip", "Hint", "Help", "Quit"}
        assert not set(cut) & {"Retry", "Accept", "Skip", "Hint", "Help", "Quit", "Filter"}, cut
        if not remapped:
            assert cut == [], cut
