"""Email in the settings screen (tui/screens/email.py), through the real app, core and key store."""

from __future__ import annotations

import stat

import pytest
from test_events_panel import screen_text

pytestmark = pytest.mark.anyio

PASSWORD = "app-pw-7c1d9e44"


async def _set(pilot, app, wait_for, wait_for_input, key: str, value: str) -> str:
    """Enter on the row `key`, type `value`, send; returns the one notice that answers."""
    app.clear_notifications()
    app.screen.query_one("#settings-table").select_key(key)
    await pilot.press("enter")
    await wait_for_input(pilot, "ValueModal")
    await pilot.press("ctrl+u", *value, "enter")  # the cursor starts after the value: ctrl+u clears it

    def refusal() -> str:
        return str(app.screen.query_one("#value-error").render()) if type(app.screen).__name__ == "ValueModal" else ""

    await wait_for(pilot, lambda: (app._notifications and type(app.screen).__name__ == "SettingsScreen")
                   or refusal())
    if refusal():  # core said no: the dialog stays with what was typed
        said = refusal()
        assert app.screen.query_one("#value").value == value
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "SettingsScreen")
        return said
    return next(iter(app._notifications)).message


async def test_email_is_set_up_field_by_field_checked_by_core_and_the_password_never_shown(
        cockpit_repo, make_app, wait_for, wait_for_input, monkeypatch) -> None:
    from pilothouse.core.notify import settings as st

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # a headless box
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("C")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "SettingsScreen")
        table = app.screen.query_one("#settings-table")
        assert str(table.get_cell("email:password", "value")) == "not set"
        assert "off · set address, operator, imap_host, smtp_host, then the password" in str(table.get_cell("email:", "value"))

        said = await _set(pilot, app, wait_for, wait_for_input, "email:address", "pilot@pilothouse.test")
        assert said.startswith("email.address kept; still to set: operator, imap_host, smtp_host")
        assert not st.settings_file().exists()
        said = await _set(pilot, app, wait_for, wait_for_input, "email:operator", "me")
        assert said == "email: operator: 'me' is not a plain address like you@example.com"
        said = await _set(pilot, app, wait_for, wait_for_input, "email:operator", "me@example.org")
        said = await _set(pilot, app, wait_for, wait_for_input, "email:imap_host", "imap.example.net")
        assert not st.settings_file().exists()
        said = await _set(pilot, app, wait_for, wait_for_input, "email:smtp_host", "smtp.example.net")
        assert said.startswith(f"email settings saved in {st.settings_file()}")
        assert stat.S_IMODE(st.settings_file().stat().st_mode) == 0o600
        saved = st.load()
        assert saved is not None and (saved.address, saved.operator, saved.smtp_host, saved.imap_port) == (
            "pilot@pilothouse.test", "me@example.org", "smtp.example.net", 993) and saved.enabled_at
        said = await _set(pilot, app, wait_for, wait_for_input, "email:smtp_port", "lots")
        assert said.startswith("email: smtp_port: Input should be a valid integer")
        assert st.load() == saved  # refused: the file as it was

        app.clear_notifications()
        table.select_key("email:password")
        await pilot.press("enter")
        await wait_for_input(pilot, "PasswordModal")
        await pilot.press(*PASSWORD)
        assert PASSWORD not in screen_text(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")  # no keyring: a file?
        await pilot.press("y")
        await wait_for(pilot, lambda: str(table.get_cell("email:password", "value")) == "set")
        assert st.password() == PASSWORD
        assert PASSWORD not in screen_text(app) and all(PASSWORD not in n.message for n in app._notifications)
        assert PASSWORD not in st.settings_file().read_text()

        table.select_key("email:")
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
        await pilot.press("y")
        await wait_for(pilot, lambda: not st.settings_file().exists())
        assert st.password() is None
        await wait_for(pilot, lambda: str(table.get_cell("email:password", "value")) == "not set")


async def test_an_optional_field_clears_and_a_required_one_says_it_cannot(cockpit_repo, make_app, wait_for,
                                                                          wait_for_input) -> None:
    from pilothouse.core.notify import settings as st

    st.save(st.validate({"address": "pilot@pilothouse.test", "operator": "me@example.org", "imap_host": "imap.example.net",
                         "smtp_host": "smtp.example.net", "username": "pilot-login", "trust_server": "mx.example.net"}))
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("C")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "SettingsScreen")
        table = app.screen.query_one("#settings-table")
        await wait_for(pilot, lambda: str(table.get_cell("email:username", "value")) == "pilot-login")
        said = await _set(pilot, app, wait_for, wait_for_input, "email:username", "")
        assert said.startswith("email.username cleared (its default applies); email settings saved in")
        assert st.load().username == "" and st.load().trust_server == "mx.example.net"
        assert str(table.get_cell("email:username", "value")) == "—"  # the default: the login is the address
        said = await _set(pilot, app, wait_for, wait_for_input, "email:address", "")
        assert said == "email.address: it is required and cannot be cleared: type a new value (esc keeps it)"
        assert st.load().address == "pilot@pilothouse.test"
