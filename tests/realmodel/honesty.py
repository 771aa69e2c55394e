"""What the real-model suite asks of every verdict (issue 21's "done when"): usage that equals the
server's own counts or says it is an estimate, never a bare 0; a state that fits what happened and,
when not `completed`, a one-line reason that names it; claims checked against the work.

The verdict's field names for the usage label and the reason are read loosely (any key of the
verdict, its `tokens` or `usage` holding measured/estimated/unknown; `reason`, else `error` or
`parse_error`): the suite pins the behaviour, not the spelling."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from recorder import Exchange

USAGE_KINDS = ("measured", "estimated", "unknown")
# the facts a reason may name, each with the words that name it
CUT_OFF = re.compile(r"(?i)output cap|cut off|max_tokens|finish_reason|\blength\b")
NO_TOOLS = re.compile(r"(?i)tool")
NO_BLOCK = re.compile(r"(?i)result block|no result|unstructured|RESULT")
EMPTY = re.compile(r"(?i)empty|no answer|nothing|no text")
PLACEHOLDER = re.compile(r"<[^<>]*>")
# a refusal before the model is asked names what the model lacks for the mode or role
CAPABILITY = re.compile(r"(?i)tool|capabilit")


def usage_kind(v: dict[str, Any]) -> str | None:
    """How the verdict says its token counts were obtained, or None when it does not say."""
    places = [v, v.get("tokens") or {}, v.get("usage") if isinstance(v.get("usage"), dict) else {}]
    for place in places:
        for key, val in place.items():
            if isinstance(val, str) and val in USAGE_KINDS:
                return val
            if "estimat" in key and val is True:
                return "estimated"
    return None


def reason_of(v: dict[str, Any]) -> str:
    return str(v.get("reason") or v.get("error") or v.get("parse_error") or "")


def run_exchanges(exchanges: list[Exchange], marker: str) -> list[Exchange]:
    """The model turns of one run: the builtin worker's requests that carry the run's task."""
    return [ex for ex in exchanges if ex.worker and ex.mentions(marker)]


def usage_findings(v: dict[str, Any], turns: list[Exchange]) -> list[str]:
    """What is dishonest about the verdict's usage (nothing: [])."""
    if not turns:
        return ["the run sent no request to the model server"]
    served_in = sum(ex.prompt_tokens for ex in turns)
    served_out = sum(ex.completion_tokens for ex in turns)
    tok = v["tokens"]
    ours_in = tok["input"] + tok["cache_read"] + tok["cache_write"]
    ours_out = tok["output"] + tok["reasoning"]
    kind = usage_kind(v)
    said = f"verdict tokens {tok} ({kind or 'unlabelled'}); the server counted {served_in} in, {served_out} out"
    if kind is None:
        return [f"the verdict does not say whether its usage is measured or estimated: {said}"]
    if kind == "measured":
        if not all(ex.exact for ex in turns):
            return [f"measured, but the server's log cannot tell every count: {said}"]
        return [] if (ours_in, ours_out) == (served_in, served_out) else [f"measured counts differ: {said}"]
    # the server reported nothing, so an estimate is the honest answer; "unknown" with zeros is
    # not, when the prompt was there to count
    if kind != "estimated" or ours_in <= 0:
        return [f"the server counted tokens, the verdict has no estimate of them: {said}"]
    # the answer's text is what an estimate sees exactly: within a factor of the truth
    if served_out and not served_out / 3 <= ours_out <= served_out * 3:
        return [f"the estimate of the answer is far off: {said}"]
    return []


def reason_findings(v: dict[str, Any], turns: list[Exchange]) -> list[str]:
    """A verdict that is not completed: a one-line reason naming at least one thing that happened."""
    if v["verdict"] == "completed":
        return []
    reason = reason_of(v).strip()
    if not reason:
        return [f"verdict {v['verdict']} ({v['parse_state']}) carries no reason"]
    if "\n" in reason:
        return [f"the reason is not one line: {reason!r}"]
    facts = []
    if turns and turns[-1].finish_reason == "length":
        facts.append(CUT_OFF)
    if not any(ex.tool_calls for ex in turns):
        facts.append(NO_TOOLS)
    if v["parse_state"] in ("unstructured", "unavailable"):
        facts.append(NO_BLOCK)
    if turns and not turns[-1].text.strip():
        facts.append(EMPTY)
    if facts and not any(f.search(reason) for f in facts):
        return [f"the reason {reason!r} names none of what happened: {[f.pattern for f in facts]}"]
    return []


def explore_findings(v: dict[str, Any], repo: Path) -> list[str]:
    """A completed explore run: facts that point at real lines of real files, no template text."""
    facts = (v.get("result") or {}).get("facts") or []
    if not facts:
        return [f"an explore run completed with no facts: {v['result']}"]
    out = []
    for fact in facts:
        path, _, line = str(fact.get("file_line", "")).rpartition(":")
        target = repo / path
        if not path or PLACEHOLDER.search(str(fact.get("fact", "")) + path):
            out.append(f"a fact copied from the prompt's template was accepted: {fact}")
        elif not (target.is_file() and target.resolve().is_relative_to(repo.resolve())):
            out.append(f"a fact points at no file of the repository: {fact}")
        elif not (line.isdigit() and 1 <= int(line) <= len(target.read_text().splitlines())):
            out.append(f"a fact points at no line of {path}: {fact}")
    return out


def changed_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    return sorted(line[3:] for line in out.splitlines() if line.strip())
