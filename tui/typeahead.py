"""Keys typed ahead are applied in order, each with the focus and cursor the one before left.

Textual hands a key to the widget focused *when the key is read* and lets it bubble up to the
bindings through each widget's own queue; a focus change is itself a queued callback. So keys
that arrive in one write (a paste, one SSH packet: `4h`, `3jj`) were all handed to the panel
focused before the first of them ran: `4h` asked for a hint on the previous panel's problem.

The gate lets one key in at a time: the next is held until every message the last one caused
(its bubbling, the action's focus change, the screen it pushed being mounted and focused) has
been handled, i.e. until every message pump of the app is idle. A single key is never delayed.
No timing is involved: only the state of the queues.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from textual import events

if TYPE_CHECKING:
    from textual.app import App
    from textual.message_pump import MessagePump

# a bound on one settling, in event-loop turns: a pump that never goes idle (a worker posting
# without end) must not hold the operator's keys forever
_MAX_TURNS = 2000


def _busy(pump: MessagePump) -> bool:
    return (not pump._message_queue.empty() or pump._pending_message is not None
            or bool(pump._next_callbacks) or not pump._is_mounted)


class KeyGate:
    """Only keys typed ahead pay for the wait: a key that finds the app idle goes on at once, and the
    queues are looked at only while a key is held."""

    def __init__(self, app: App[object]) -> None:
        self.app = app
        self.held: deque[events.Key] = deque()
        self.in_flight = False  # a key went on and the app has not been seen idle since
        self.polling = False

    def admit(self, event: events.Event) -> bool:
        """True when `event` may go on now; a key read while the last one is still in flight is held."""
        if not isinstance(event, events.Key) or event.is_forwarded:
            return True
        if self.held or (self.in_flight and self._busy()):
            self.held.append(event)
            if not self.polling:
                self.polling = True
                self.app.call_later(self._settle, 0)
            return False
        self._went_on()
        return True

    def _went_on(self) -> None:
        self.in_flight = True
        self.app.call_after_refresh(self._look)

    def _look(self) -> None:
        """Once after a key's frame: idle by then, the next key need not look at the queues."""
        if not self.held and not self._busy():
            self.in_flight = False

    def _app_busy(self) -> bool:
        # a callback the app's pump has peeked (its _pending_message) is off the queue but not yet
        # run: the focus change queued by the key before ("5" focusing the Events panel) hid there,
        # and `5/task` then sent "/" and "t" to the panel focused before. Only a callback counts:
        # waiting on any peeked message held a pushed dialog's keys while it mounted
        app = self.app
        return (not app._message_queue.empty() or bool(app._next_callbacks)
                or isinstance(app._pending_message, events.Callback))

    def _busy(self) -> bool:
        app = self.app
        if self._app_busy():
            return True
        for screen in app.screen_stack:
            if _busy(screen):
                return True
            for widget in screen.walk_children(with_self=False):
                if _busy(widget):
                    return True
        return False

    async def _settle(self, turns: int) -> None:
        app = self.app
        while turns < _MAX_TURNS:
            if self._app_busy():
                # the app's own queue holds more of the last key's work (its bubbled copy, a focus
                # change): let it run first, then look again
                app.call_later(self._settle, turns + 1)
                return
            if not self._busy():
                break
            turns += 1
            await asyncio.sleep(0)  # the widgets' queues run in their own tasks
        key = self.held.popleft()
        if self.held:
            app.call_later(self._settle, 0)
        else:
            self.polling = False
        self._went_on()
        await app._forward_key(key)  # type: ignore[attr-defined]
