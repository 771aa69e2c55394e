"""What a run produced, event by event, and the verdict it earns (docs/contracts.md).

Verdict rules, in order:
- quota      the provider refused for quota/rate limit (HTTP 429 or the runner's quota error);
- completed  a result block parsed, passed the claim checks (core/dispatch/claims.py) and, for
             code/resume, its status is `complete` with the files it names changed;
- partial    a parsed code result that is partial/blocked, or names files the run did not change;
- error      an auth/fatal/transient error, a spawn failure, or a non-zero exit with no text;
- empty      the worker ended cleanly without saying anything, or a code run that changed nothing
             (whatever it claimed);
- partial    everything else with text: unstructured or malformed result, timeout, idle timeout,
             interruption, step cap.
Every verdict but `completed` carries `reason`: one line the operator can act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pilothouse.core.dispatch.process import ProcOutcome

STDERR_TAIL = 2000


@dataclass
class RunState:
    """Accumulates normalised events (duck-typed: providers.contract dataclasses)."""

    texts: list[str] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("input", "output", "reasoning", "cache_read", "cache_write"), 0))
    cost: float = 0.0
    steps: int = 0
    denied: int = 0
    tool_other: int = 0
    session_id: str | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)  # (class, message)
    quota: list[dict[str, Any]] = field(default_factory=list)
    stderr_tail: bytes = b""
    sources: set[str] = field(default_factory=set)  # where each turn's usage came from
    answered: bool = False  # the model said or did something (text, reasoning, a tool call)
    tool_events: int = 0
    output_capped: bool = False  # a model turn ended at the output cap (finish_reason `length`)

    def add(self, ev: Any) -> None:
        kind = ev.kind
        if kind in ("text", "reasoning", "tool"):
            self.answered = True
        if kind == "text":
            self.texts.append(ev.text)
        elif kind == "usage":
            self.steps += 1
            for k in self.tokens:
                self.tokens[k] += int(getattr(ev, k) or 0)
            self.cost += float(ev.cost or 0.0)
            source = getattr(ev, "source", "measured")
            # a model turn always reads a prompt: a "measured" turn of no tokens at all is a runner
            # passing on a server that reported nothing (OpenCode against llama.cpp), not a count
            if source == "measured" and not any(int(getattr(ev, k) or 0) for k in self.tokens):
                source = "unknown"
            self.sources.add(source)
        elif kind == "tool":
            self.tool_events += 1
            if ev.status == "denied":
                self.denied += 1
            elif ev.status == "error":
                self.tool_other += 1
        elif kind == "session":
            self.session_id = ev.id
        elif kind == "error":
            self.errors.append((ev.error_class, ev.message))
        elif kind == "quota":
            self.quota.append({"window": ev.window, "used_pct": ev.used_pct, "resets_at": ev.resets_at})
        elif kind == "limit" and ev.reason == "output_cap":
            self.output_capped = True

    @property
    def usage(self) -> str:
        """The run's usage label: `unknown` when any turn went uncounted (or the model answered
        without a usage event), `estimated` when any turn was estimated, else `measured` (which a
        run that never reached the model is too: nothing was answered, nothing was counted)."""
        if "unknown" in self.sources or (self.answered and not self.sources):
            return "unknown"
        return "estimated" if "estimated" in self.sources else "measured"

    def add_stderr(self, chunk: bytes) -> None:
        self.stderr_tail = (self.stderr_tail + chunk)[-STDERR_TAIL * 2:]


@dataclass
class _Parsed:
    state: str
    result: dict[str, Any] | None
    error: str | None


def cost_from_tokens(tokens: dict[str, int], cost_cfg: Any) -> float:
    """USD from the provider's per-1M prices, for runners that report no cost themselves."""
    if cost_cfg is None:
        return 0.0
    inp = float(getattr(cost_cfg, "input", 0) or 0)
    outp = float(getattr(cost_cfg, "output", 0) or 0)
    cache_read = getattr(cost_cfg, "cache_read", None)
    cr = float(cache_read if cache_read is not None else inp)
    usd = (tokens["input"] + tokens["cache_write"]) * inp + tokens["cache_read"] * cr \
        + (tokens["output"] + tokens["reasoning"]) * outp
    return round(usd / 1_000_000, 6)


def final_text(state: RunState, runner: Any) -> str | None:
    text = runner.final_text()
    if text is None and state.texts:
        text = "\n\n".join(t.strip("\n") for t in state.texts)
    return text or None


@dataclass
class Work:
    """What the run did, to check its claims against: the files a code run changed (None when the
    workdir is not a git checkout), and the workdir an explore run's facts must point into."""

    changed: list[str] | None = None
    root: str | None = None


def decide(state: RunState, out: ProcOutcome, mode: str, text: str | None, step_cap: int,
           work: Work | None = None) -> dict[str, Any]:
    """verdict, parse_state, parse_error, result, error_class, error, reason."""
    from pilothouse.core.dispatch import claims
    from pilothouse.providers import contract_fast

    work = work or Work()
    fast = contract_fast.parse_result(text, mode)
    if fast is not None:
        parsed: Any = _Parsed(*fast)
    else:  # not plainly valid: pydantic judges, and names the first bad field
        from pilothouse.providers.contract import parse_result

        parsed = parse_result(text, mode)
    if parsed.state == "parsed" and parsed.result is not None:
        bad = claims.vet_result(parsed.result, mode)
        if bad is None and mode == "explore" and work.root is not None:
            bad = claims.check_facts(parsed.result, work.root)
        if bad is not None:
            parsed = _Parsed("malformed", None, bad)
    error_class: str | None = None
    error: str | None = None
    reason: str | None = None
    if state.errors:
        error_class, error = state.errors[-1]
    step_capped = step_cap > 0 and state.steps >= step_cap and parsed.state != "parsed"
    coding = mode in ("code", "resume") and work.changed is not None
    if out.spawn_error:
        verdict, error_class, error = "error", "fatal", out.spawn_error
    elif error_class == "quota" or (state.quota and error_class is None and not text):
        verdict, error_class = "quota", "quota"
    elif parsed.state == "parsed" and parsed.result is not None:
        status = parsed.result.get("status") if mode in ("code", "resume") else "complete"
        verdict = "completed" if status == "complete" else "partial"
        if verdict == "partial":
            said = parsed.result.get("blocked_reason")
            reason = f"the worker reports its work {status}" + (f": {said}" if said else "")
        elif coding:
            found = claims.check_code(parsed.result, work.changed or [])
            if found is not None:
                verdict, reason = found
    elif error_class is not None:
        verdict = "error"
    elif not text:
        clean = out.exit_code == 0 and not (out.timed_out or out.idle_timed_out or out.interrupted)
        verdict = "empty" if clean and not step_capped else "error"
        if not clean and error is None:
            error = _why_ended(out, step_cap) or f"the worker exited with code {out.exit_code} and no text"
    elif coding and not work.changed and not (out.timed_out or out.idle_timed_out or out.interrupted
                                              or step_capped):
        verdict = "empty"  # it ended by itself with no result and no work either: nothing was done
    elif mode not in ("code", "resume") and parsed.state == "unstructured" and state.tool_events == 0 and not (
            out.timed_out or out.idle_timed_out or out.interrupted or step_capped or state.output_capped):
        # an explore, plan or review that read nothing and wrote no result block: no partial work was
        # done (`partial` is kept for a run that worked and ran out), and the reason says why
        verdict = "empty"
    else:
        verdict = "partial"
    if out.timed_out or out.idle_timed_out or out.interrupted or step_capped:
        why = _why_ended(out, step_cap, step_capped)
        error = f"{why} (then: {error})" if error and why and why not in error else (why or error)
    if verdict != "completed" and reason is None:
        reason = _reason(verdict, parsed, state, text, mode, error, error_class, work)
    return {"verdict": verdict, "parse_state": parsed.state, "parse_error": parsed.error,
            "result": parsed.result, "error_class": error_class, "error": error, "reason": reason}


_REFUSAL = re.compile(r"^\W*(I'm sorry|I am sorry|Sorry,|I can(?:no|')t|I won't|I will not|I'm unable|I am unable|"
                      r"As an AI)", re.IGNORECASE)
TOOL_MODES = ("code", "resume", "explore", "test")


def _reason(verdict: str, parsed: Any, state: RunState, text: str | None, mode: str, error: str | None,
            error_class: str | None, work: Work) -> str:
    """Why a run did not complete, in one line that says what to do about it."""
    if verdict == "quota":
        return f"usage limit: {error or 'the provider refused for quota'}; the work waits for the window to reset"
    if verdict == "error":
        if error_class == "auth":
            return f"the endpoint refused the credentials ({error}): fix the key (pilothouse keys set)"
        if error_class in ("transient", "fatal") and error:
            return f"endpoint or worker error: {error}"
        return error or "the worker ended with an error and no text"
    if state.output_capped:
        return ("cut off at the output cap (finish_reason length) before the result block: raise the "
                "provider's output_tokens, or give the task less to write")
    if error:  # timed out, idle, interrupted, step cap
        return error
    if not text:
        return "empty answer: the model returned no text"
    first = text.strip().splitlines()[0][:120] if text.strip() else ""
    if parsed.state == "unstructured" and _REFUSAL.match(text.strip()):
        return f"refusal: the model declined the task ({first!r})"
    if parsed.state == "unstructured" and text.strip().endswith("sim: script finished"):
        # the simulator's scripted worker ran out of turns (providers/sim/engine.FINISHED): its
        # script is at fault, not a server that dropped `tools`
        return ("script finished: the simulator's script for this run has no more turns and none gave a result "
                "block; end the scenario's script with a turn that says <!--RESULT-->…<!--/RESULT--> "
                "(docs/scenarios.md)")
    if parsed.state == "unstructured" and mode in TOOL_MODES and state.tool_events == 0:
        return ("no tool calls although the task needed them: the server likely dropped `tools` or calls "
                "them only when forced (check with: pilothouse providers check PROVIDER)")
    if parsed.state == "unstructured":
        what = "no result block: the answer does not end with <!--RESULT-->…<!--/RESULT-->"
    else:
        what = f"result block rejected: {parsed.error}"
    if mode in ("code", "resume") and work.changed is not None:
        what += (f"; the worktree has changes to {', '.join(work.changed[:5])}" if work.changed
                 else "; the run made no change in the worktree")
    return what


def _why_ended(out: ProcOutcome, step_cap: int, step_capped: bool = False) -> str | None:
    if out.interrupted:
        return "interrupted: the worker was stopped on request"
    if out.timed_out:
        return "timed out: the run exceeded its overall timeout"
    if out.idle_timed_out:
        return "idle timeout: the worker produced no output for too long"
    if step_capped:
        return f"step cap: the worker used all {step_cap} steps without finishing"
    if out.aborted_reason:
        return out.aborted_reason
    return None


def verdict_line(fields: dict[str, Any]) -> str:
    """The verdict as its one JSON line, validated by the shared contract model (through
    contract_fast when the fields are plainly valid: same line, no pydantic import)."""
    from pilothouse.providers import contract_fast

    line = contract_fast.verdict_line(fields)
    if line is not None:
        return line
    from pilothouse.providers.contract import Verdict

    return Verdict.model_validate(fields).line()


def started_line(fields: dict[str, Any]) -> str:
    # printed before the worker runs, so it never waits for pydantic; no model checks it, as
    # dispatch sets every field itself (tests/core/test_dispatch.py pins the keys and their order)
    return json.dumps({"type": "pilothouse.started", "schema": 1, **fields}, separators=(",", ":"))


def human_summary(v: dict[str, Any]) -> str:
    from pilothouse.providers.usage import tokens_text, verdict_tokens

    parts = [f"{v['verdict']} ({v['parse_state']})", f"{v['steps']} steps", f"{v['duration_s']:.1f}s",
             tokens_text(verdict_tokens(v), v.get("usage"))]
    for flag in ("timed_out", "idle_timed_out", "interrupted"):
        if v.get(flag):
            parts.append(flag.replace("_", " "))
    if v["tool_errors"]["permission_denied"]:
        parts.append(f"{v['tool_errors']['permission_denied']} denied")
    return ", ".join(parts)


Redact = Callable[[str], str]
