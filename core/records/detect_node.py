"""What a package.json says its tests are: the test script, followed through `npm run X`, down to
the test runner it starts.

`npm test` also runs `pretest` and `posttest`, which in many packages lint (eslint) or audit the
dependencies online (`aud`, `npm audit`): a gate that fails on a style nit or a network outage says
nothing about the work. When those hooks are there, the gate runs the runner itself from the
checkout's node_modules; coverage wrappers (nyc, c8) are dropped, since their report folder would
count as files the gate left behind.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from pilothouse.core.records.detect_python import read_text

PLACEHOLDER = "no test specified"
RUNNERS = ("tape", "mocha", "jest", "vitest", "ava", "tap", "jasmine", "uvu", "qunit", "lab", "borp",
           "node")
_WRAPPERS = ("nyc", "c8", "cross-env", "istanbul")
_LINT = re.compile(r"\b(eslint|standard|xo|prettier|tsc|lint|aud|audit|depcheck|attw|publint)\b")


def scripts_of(root: Path) -> dict[str, str]:
    try:
        scripts = json.loads(read_text(root / "package.json") or "{}").get("scripts") or {}
    except (ValueError, AttributeError):
        return {}
    return {k: v for k, v in scripts.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(scripts, dict) else {}


def tool_of(root: Path) -> tuple[str, str | None]:
    """(npm, pnpm or yarn, the lockfile that says so)."""
    return next(((t, f) for t, f in (("pnpm", "pnpm-lock.yaml"), ("yarn", "yarn.lock"),
                                     ("npm", "package-lock.json")) if (root / f).exists()), ("npm", None))


def _runner(scripts: dict[str, str], script: str, depth: int = 0) -> tuple[str, list[str]] | None:
    """(the runner command a script ends in, the scripts it went through), following `npm run X`;
    None when a step of it is no test runner."""
    body = scripts.get(script, "")
    if depth > 5 or not body:
        return None
    for part in (p.strip() for p in re.split(r"&&|;", body)):
        m = re.match(r"^(?:npm|pnpm|yarn)\s+(?:run(?:-script)?\s+)?([\w:.-]+)\s*$", part)
        if m and m.group(1) in scripts:
            if _LINT.search(m.group(1)):
                continue
            found = _runner(scripts, m.group(1), depth + 1)
            if found:
                return found[0], [script, *found[1]]
            continue
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words:
            if words[0] in _WRAPPERS:  # and the wrapper's own options: nyc --reporter=lcov tape …
                words = words[1:]
                while words and words[0].startswith("-"):
                    words = words[1:]
            elif "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
                words = words[1:]  # VAR=value
            else:
                break
        if words and words[0] in RUNNERS and not (words[0] == "node" and "--test" not in words):
            return " ".join(shlex.quote(w) for w in words), [script]
    return None


def node_gate(root: Path) -> tuple[str, str, list[str]] | None:
    """(gate, why, warnings) from package.json's test script, or None without one."""
    scripts = scripts_of(root)
    test = scripts.get("test", "")
    if not test.strip() or PLACEHOLDER in test:
        return None
    tool, lock = tool_of(root)
    via = f", run with {tool}" + (f" ({lock})" if lock else "")
    hooks = {h: scripts[h] for h in ("pretest", "posttest") if scripts.get(h, "").strip()}
    chained = bool(_LINT.search(test))
    if not hooks and not chained:
        return f"{tool} test", f"package.json's test script ({test[:60]}){via}", []
    found = _runner(scripts, "test")
    said = "; ".join(f"{h} runs {v!r}" for h, v in hooks.items()) or f"the test script also runs {test[:60]!r}"
    if found is None:
        return (f"{tool} test", f"package.json's test script ({test[:60]}){via}",
                [f"`{tool} test` also runs more than the tests ({said}): name the test runner alone "
                 "with --gate-fast/--gate-full if that fails for reasons that are not the work's"])
    cmd, chain = found
    program, _, rest = cmd.partition(" ")
    local = Path("node_modules") / ".bin" / program
    if program != "node":  # the checkout's own, shared into the sandbox: npm's PATH is not the gate's
        cmd = f"{local}{' ' + rest if rest else ''}"
    return (cmd, f"test runner ({' → '.join(chain)}: {cmd}), without what `{tool} test` adds "
                 f"around it ({said})", [])
