"""Pick the scripted answer for a request: which script, which turn, and what it says.

Stateless: the script is chosen from the request's worker prompt (mode marker + substrings)
and the turn from how many model turns its history already holds, so one sim serves many
concurrent runs and a resumed session simply continues.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass

from pilothouse.providers.sim import imitate, limits
from pilothouse.providers.sim.dialect import Unmappable, map_actions
from pilothouse.providers.sim.request import Reply, SimRequest, Usage
from pilothouse.providers.sim.resets import ResetBook
from pilothouse.providers.sim.scenario import ErrorCue, Scenario, ServerSpec, Turn, UsageSpec
from pilothouse.providers.workerfs import read_in_tree

FINISHED = "sim: script finished"


@dataclass
class Outcome:
    script: int | None  # index of the script that matched (None: none did)
    turn: int
    reply: Reply
    error: ErrorCue | None = None
    fault: str | None = None
    delay_s: float = 0.0


def respond(scenario: Scenario, request: SimRequest, book: ResetBook | None = None,
            now: float | None = None, *, failed: dict[str, str] | None = None,
            server: ServerSpec | None = None) -> Outcome:
    """The scripted answer, as the server the scenario imitates would send it (`server`, else the
    scenario's own `server:` switches; see imitate.py). The request's `root` (the run's real worktree, set by the server, never
    the cwd a worker claims) lets a scripted `edit` be checked against the file; `failed` (the
    server's memory) holds, per run, the action that could not apply: every later turn of that
    script says so instead of going on as written."""
    spec = server if server is not None else scenario.server
    outcome = _respond(scenario, request, book, now, failed, imitate.calls_allowed(spec, request))
    outcome.reply = imitate.cut(outcome.reply, imitate.output_cap(spec, request))
    outcome.reply.show_usage = imitate.shows_usage(spec, request.stream)
    return outcome


def _respond(scenario: Scenario, request: SimRequest, book: ResetBook | None, now: float | None,
             failed: dict[str, str] | None, calls: bool) -> Outcome:
    prompt = request.prompt
    turn_index = request.assistant_turns
    now = time.time() if now is None else now
    digest = hashlib.sha1(prompt.encode()).hexdigest()[:16]
    for s_index, script in enumerate(scenario.scripts):
        if not script.match.fits(prompt):
            continue
        run_key = f"{scenario.name}|{s_index}|{digest}"
        if failed is not None and run_key in failed and turn_index > 0:
            return Outcome(s_index, turn_index, _reply(request, failed[run_key], [], None))
        keys = [f"{scenario.name}|{s_index}|{pos}|{digest}" for pos in range(len(script.turns))]
        # error turns whose reset has passed are gone, as if the window had never closed
        live = [(pos, turn) for pos, turn in enumerate(script.turns)
                if not (book and turn.error and turn.error.until_reset and book.passed(keys[pos], now))]
        if turn_index >= len(live):
            return Outcome(s_index, turn_index, _reply(request, FINISHED, [], None))
        pos, turn = live[turn_index]
        outcome = _outcome(request, s_index, turn_index, turn, calls)
        cannot = _edit_that_cannot_apply(turn, request.root)
        if cannot is not None and failed is not None:
            # the call still goes out (the worker's edit tool fails it, in its own log); the run then
            # ends on this explanation, with no result block: never "completed"
            failed[run_key] = (f"sim: scenario {scenario.name}, script {s_index + 1}, turn {pos + 1}: {cannot}; "
                               "the script stops here (fix the scenario's `old` text to match the file)")
        if book and turn.error and turn.error.until_reset:
            reset = book.reset_at(keys[pos], limits.retry_after(turn.error), now)
            outcome.error = turn.error.model_copy(update={"retry_after_s": max(1, math.ceil(reset - now))})
        return outcome
    text = f"sim: no script matched this request (scenario {scenario.name})"
    return Outcome(None, turn_index, _reply(request, text, [], None))


_EDIT_READ_LIMIT = 4 << 20  # a scripted edit checks files up to this size


def _edit_that_cannot_apply(turn: Turn, cwd: str | None) -> str | None:
    """Why a scripted `edit` of this turn cannot apply to the file as it is (its old text is not
    there exactly once, or there is no such file), or None; unknown without a working directory."""
    if cwd is None:
        return None
    touched: set[str] = set()
    for raw in turn.actions:
        (kind, args), = raw.items()
        rel = str(args.get("path", ""))
        if kind not in ("write", "edit") or rel in touched:
            continue  # an earlier action of this turn changes the file first: nothing to check yet
        touched.add(rel)
        if kind != "edit":
            continue
        try:
            # the worktree is the worker's: its links are never followed out of it
            entry = read_in_tree(cwd, rel, _EDIT_READ_LIMIT)
        except (OSError, ValueError):
            continue  # not a plain path inside the worktree: the worker's own tool refuses it
        if entry.kind == "missing":
            return f"edit {args.get('path')}: there is no such file"
        if entry.kind != "file":
            continue  # a link or a special file: not read, so not checked
        text = entry.text()
        found = text.count(str(args.get("old", ""))) if args.get("old") else 0
        if found != 1:
            return f"edit {args.get('path')}: its old text occurs {found} times in the file (it must occur once)"
    return None


def _outcome(request: SimRequest, s_index: int, t_index: int, turn: Turn, with_calls: bool = True) -> Outcome:
    if turn.error is not None:
        return Outcome(s_index, t_index, _reply(request, "", [], None, zero=True), error=turn.error,
                       delay_s=turn.delay_s)
    text = turn.say or ""
    calls = []
    try:
        if with_calls:  # else the server imitated drops them: the scripted text comes back alone
            calls = map_actions(turn.actions, request, t_index)
    except Unmappable as exc:
        text = f"{text}\n\n{exc}" if text else str(exc)
    if turn.fault and not text and not calls:
        text = "sim: this answer is about to break"
    reply = _reply(request, text, calls, turn.usage, zero=turn.fault is not None)
    reply.cut = turn.finish == "length"
    return Outcome(s_index, t_index, reply, fault=turn.fault, delay_s=turn.delay_s)


def _reply(request: SimRequest, text: str, calls: list, spec: UsageSpec | None, zero: bool = False) -> Reply:
    return Reply(text=text, calls=calls, usage=Usage() if zero else usage_for(request, text, calls, spec))


def usage_for(request: SimRequest, text: str, calls: list, spec: UsageSpec | None) -> Usage:
    """The scenario's numbers, else deterministic ones from text sizes (4 chars a token, at least 1)."""
    out_chars = len(text) + sum(len(c.name) + len(c.arguments) for c in calls)
    tools_chars = len(json.dumps([t.name for t in request.tools]))
    default_in = max(1, (request.chars + tools_chars) // 4)
    default_out = max(1, out_chars // 4)
    if spec is None:
        return Usage(input=default_in, output=default_out)
    return Usage(
        input=default_in if spec.input is None else spec.input,
        output=default_out if spec.output is None else spec.output,
        reasoning=spec.reasoning, cache_read=spec.cache_read, cache_write=spec.cache_write,
    )
