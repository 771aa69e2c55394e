"""Tool calls assembled from a chat-completions stream, the way servers really send them.

The OpenAI rule is: a call's first delta carries its `index`, `id`, `type` and `function.name`, and
later deltas with the same `index` carry only pieces of `function.arguments`. Servers keep to it
loosely, and each way below was seen or is documented:
- llama.cpp repeats `function.name` (and `id`) in every delta of a call; appending them turned
  `read` into `readreadread…`, and the probe then judged that the server never called the tool.
- ollama sends each call whole in one delta, arguments complete, sometimes with no `index`.
- some servers resend the arguments so far (cumulative) instead of the next piece, or send them as
  a JSON object rather than a string.
- with parallel calls, deltas of several indexes interleave.
So: a name or id is set once and a repeat of it is ignored; arguments are appended unless the new
piece repeats what came so far; a delta without an index belongs to the call its id names, or to a
new call when it names a new id, or else to the last call.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # the worker's start-up budget: typing is not imported (see builtin_http.py)
if TYPE_CHECKING:
    from typing import Any


class ToolCalls:
    """The calls of one streamed answer, in index order."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}
        self._last: int | None = None

    def add(self, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        slot = self._slot(delta)
        if delta.get("id") and isinstance(delta["id"], str):
            slot["id"] = slot["id"] or delta["id"]
        fn: dict[str, Any] = delta["function"] if isinstance(delta.get("function"), dict) else {}
        name = fn.get("name")
        if isinstance(name, str) and name:
            have = slot["function"]["name"]
            if not have or name.startswith(have):
                slot["function"]["name"] = name  # first, repeated, or resent longer
            elif not have.endswith(name):
                slot["function"]["name"] = have + name  # a name really sent in pieces
        args = fn.get("arguments")
        if isinstance(args, dict | list):
            args = json.dumps(args)
        if isinstance(args, str) and args:
            have = slot["function"]["arguments"]
            if have and args.startswith(have):
                slot["function"]["arguments"] = args  # cumulative: the whole so far again
            else:
                slot["function"]["arguments"] = have + args

    def _slot(self, delta: dict[str, Any]) -> dict[str, Any]:
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            index = self._index_without_one(delta.get("id"))
        self._last = index
        return self._calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})

    def _index_without_one(self, call_id: Any) -> int:
        if isinstance(call_id, str) and call_id:
            for i, call in self._calls.items():
                if call["id"] == call_id:
                    return i
            if self._last is None or self._calls[self._last]["id"]:
                return max(self._calls, default=-1) + 1  # a new id: a new call
        return self._last if self._last is not None else 0

    def calls(self) -> list[dict[str, Any]]:
        return [self._calls[i] for i in sorted(self._calls)]
