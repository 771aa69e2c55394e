"""Sim scenarios: the YAML that scripts the sim's replies (the format: docs/scenarios.md).

A bad file raises UserError naming the file, the field and the fix, e.g.
`data/scenarios/x.yaml: scripts[0].turns[2]: unknown key 'sya' (expected say, actions, …)`.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# abstract action -> (required keys, optional keys)
ACTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "read": (("path",), ("offset", "limit")),
    "write": (("path", "content"), ()),
    "edit": (("path", "old", "new"), ("replace_all",)),
    "bash": (("command",), ("description", "timeout")),
    "glob": (("pattern",), ("path",)),
    "grep": (("pattern",), ("path", "include", "glob")),
    "mcp": (("tool",), ("arguments",)),  # a tool of an MCP server the client declared (dialect_mcp.py)
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Match(_Strict):
    mode: str | None = None
    contains: list[str] = Field(default_factory=list)

    def fits(self, prompt: str) -> bool:
        if self.mode and f"[pilothouse mode: {self.mode}]" not in prompt:
            return False
        return all(s in prompt for s in self.contains)


class ErrorCue(_Strict):
    status: int = Field(ge=400, le=599)
    retry_after_s: int | None = Field(default=None, ge=0)
    window: str | None = None  # five_hour, seven_day, … (the quota window the 429 names)
    used_pct: float | None = Field(default=None, ge=0)
    message: str | None = None
    # served until its reset time (first sighting + retry_after_s) has passed, then skipped — a quota
    # window that really resets; the reset time is shared by every sim process (see resets.py)
    until_reset: bool = False


class UsageSpec(_Strict):
    input: int | None = Field(default=None, ge=0)
    output: int | None = Field(default=None, ge=0)
    reasoning: int = Field(default=0, ge=0)
    cache_read: int = Field(default=0, ge=0)
    cache_write: int = Field(default=0, ge=0)


class Turn(_Strict):
    say: str | None = None
    actions: list[dict[str, dict[str, Any]]] = Field(default_factory=list)
    usage: UsageSpec | None = None
    error: ErrorCue | None = None
    fault: Literal["close_mid_stream", "garbage"] | None = None
    # the answer ends as a server's does when it reaches the output-token cap (finish_reason length)
    finish: Literal["length"] | None = None
    delay_s: float = Field(default=0.0, ge=0)

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[dict[str, dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
        for i, action in enumerate(actions):
            if len(action) != 1:
                raise ValueError(f"[{i}]: each action is one mapping like `read: {{path: src/x.py}}`, "
                                 f"got keys {sorted(action)}")
            (kind, args), = action.items()
            if kind not in ACTIONS:
                raise ValueError(f"[{i}]: unknown action '{kind}' (expected {', '.join(ACTIONS)})")
            required, optional = ACTIONS[kind]
            for key in required:
                if key not in args:
                    raise ValueError(f"[{i}].{kind}: missing '{key}' (a {kind} needs {', '.join(required)})")
            for key in args:
                if key not in required + optional:
                    raise ValueError(f"[{i}].{kind}: unknown key '{key}' "
                                     f"(expected {', '.join(required + optional)})")
        return actions

    @model_validator(mode="after")
    def _one_kind(self) -> Turn:
        if self.error and (self.say is not None or self.actions or self.fault):
            raise ValueError("a turn with 'error' cannot also have say, actions or fault (split it in two turns)")
        if not (self.say is not None or self.actions or self.error or self.fault):
            raise ValueError("empty turn: give it say, actions, error or fault")
        return self


class ServerSpec(_Strict):
    """How the sim imitates a real server's gaps (docs/scenarios.md, "Imitating a real server").

    The defaults follow the protocol; each other value is a behaviour seen from a real local
    server (llama.cpp, ollama, vLLM), so the tests can hold pilothouse to it without one."""

    # report: usage in every answer | omit_streamed: none in streams, even when asked with
    # stream_options.include_usage (whole answers still carry it) | omit: none anywhere
    usage: Literal["report", "omit_streamed", "omit"] = "report"
    # honour: tool calls as scripted | drop: declared tools are ignored, as if none were sent (the
    # scripted text comes back, its actions do not) | forced_only: tool calls only when the request's
    # tool_choice forces one (required / any / a named tool), never with auto
    tools: Literal["honour", "drop", "forced_only"] = "honour"
    # output tokens (4 characters a token) after which every answer is cut, finish_reason length:
    # a number (the request's own max_tokens cuts too, whichever is smaller), or `request` (only the
    # request's max_tokens); unset, answers are never cut
    output_cap: Annotated[int, Field(ge=1)] | Literal["request"] | None = None


class Script(_Strict):
    match: Match = Field(default_factory=Match)
    turns: list[Turn] = Field(min_length=1)


class Scenario(_Strict):
    name: str
    description: str
    scripts: list[Script] = Field(min_length=1)
    server: ServerSpec = Field(default_factory=ServerSpec)
    source: str = Field(default="", exclude=True)  # file it was loaded from (set by load_scenario)


# --- loading ------------------------------------------------------------------------------------

def scenario_dirs() -> list[Path]:
    """User scenarios (config dir) first, then the bundled ones."""
    return [paths.config_dir() / "scenarios", paths.package_data() / "scenarios"]


def _resolve(name_or_path: str | Path) -> Path:
    from pilothouse.providers.argcheck import check_path

    text = check_path(str(name_or_path), "scenario")
    candidate = Path(text).expanduser()
    if "/" in text or text.endswith((".yaml", ".yml")) or candidate.is_file():
        if not candidate.is_file():
            raise UserError(f"scenario file {text} not found (give a bundled name: "
                            f"{', '.join(n for n, _ in list_scenarios()) or 'none'})")
        return candidate
    for folder in scenario_dirs():
        path = folder / f"{text}.yaml"
        if path.is_file():
            return path
    names = ", ".join(n for n, _ in list_scenarios())
    raise UserError(f"unknown scenario '{text}' (known: {names}; or give a path to a .yaml file)")


def _display(path: Path) -> str:
    data = paths.package_data()
    try:
        return f"data/{path.resolve().relative_to(data.resolve())}"
    except ValueError:
        return str(path)


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A validated Scenario from a bundled/user name or a file path; UserError on a bad file."""
    path = _resolve(name_or_path)
    where = _display(path)
    stamp = _stamp(path)
    data = _cached(path, stamp)
    fresh = data is None
    if data is None:
        data = _read_yaml(path, where)
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping with name, description and scripts")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{where}: {_explain(exc)}") from None
    if fresh and stamp is not None:
        _remember(path, stamp, data)
    scenario.source = str(path)
    return scenario


def _read_yaml(path: Path, where: str) -> Any:
    from pilothouse.providers.userfile import read_yaml

    try:
        return read_yaml(path, where)
    except FileNotFoundError:
        raise UserError(f"{where}: vanished while being read: run the command again") from None


# A scenario's parsed YAML is kept as JSON in the cache dir, keyed by the file's path, mtime and
# size: PyYAML costs every sim run ~10-20 ms (import and a pure-Python parse). It is validated
# again on every load, so the cache only ever skips the YAML parse, never a check; data that
# JSON cannot carry exactly (dates, non-string keys) is simply not cached.

def _stamp(path: Path) -> list[Any] | None:
    try:
        st = path.stat()
        return [str(path.resolve()), st.st_mtime_ns, st.st_size]
    except OSError:
        return None


def _cache_file(stamp: list[Any]) -> Path:
    import hashlib

    return paths.cache_dir() / "scenarios" / f"{hashlib.sha256(stamp[0].encode()).hexdigest()[:24]}.json"


def _cached(path: Path, stamp: list[Any] | None) -> Any:
    if stamp is None:
        return None
    import json

    try:
        entry = json.loads(_cache_file(stamp).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry.get("data") if isinstance(entry, dict) and entry.get("stamp") == stamp else None


def _remember(path: Path, stamp: list[Any], data: Any) -> None:
    import json

    from pilothouse.providers.fsutil import atomic_write_text

    try:
        text = json.dumps({"stamp": stamp, "data": data})
        if json.loads(text)["data"] != data:
            return
        atomic_write_text(_cache_file(stamp), text + "\n", mode=0o600)
    except (TypeError, ValueError, OSError):
        pass  # not JSON-shaped, or a read-only cache dir: the next load parses the YAML again


def list_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every scenario file, user ones shadowing bundled ones."""

    seen: dict[str, str] = {}
    for folder in scenario_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in seen:
                continue
            try:
                data = _read_yaml(path, str(path))
                desc = str(data.get("description", "")) if isinstance(data, dict) else "(not a mapping)"
            except UserError:
                desc = "(unreadable: run `pilothouse sim serve --scenario " + path.stem + "` to see why)"
            seen[path.stem] = desc
    return sorted(seen.items())


# --- error messages -----------------------------------------------------------------------------

def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class whose field the location's last element names."""
    model: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        model = _unwrap(model.model_fields[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            inner = _unwrap(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return annotation


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _explain(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        model = _model_at(loc)
        expected = ", ".join(k for k in (model.model_fields if model else {}) if k != "source")
        return f"{_path(loc[:-1])}: unknown key '{loc[-1]}' (expected {expected})"
    if kind == "missing":
        if len(loc) == 1:
            return f"missing top-level key '{loc[0]}' (add it)"
        return f"{_path(loc[:-1])}: missing '{loc[-1]}' (add it)"
    if kind == "value_error":
        text = msg.removeprefix("Value error, ")
        sep = "" if text.startswith("[") else ": "
        return f"{_path(loc)}{sep}{text}"
    got = err.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) or got is None else ""
    return f"{_path(loc)}: {msg}{shown}"


# what the default explore answer may cite, first found first: a file every repository is likely
# to have at its top, else any tracked-looking regular file
_GROUNDING = ("README.md", "README.rst", "README.txt", "README", "pyproject.toml", "package.json", "go.mod",
              "Cargo.toml", "setup.py", "Makefile")


def _first_line(root: Path, rel: str) -> tuple[int, str] | None:
    """(line number, text) of the first non-blank line of a regular file under root; None when it
    is a link, not a file, not text or empty. Read bounded: the repository is the operator's, but a
    default must never hang on a FIFO or a huge file."""
    path = root / rel
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError:
        return None
    if b"\0" in head:
        return None
    for n, line in enumerate(head.decode("utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            return n, line.strip()[:160]
    return None


def grounded_explore(root: Path) -> Scenario | None:
    """The default explore scenario (explore-basic) for a repository that is not the demo's: the
    same two turns, reading and citing a file that exists there (its first line), so
    `dispatch --provider sim --mode explore --workdir .` completes on any repository. None when
    the bundled one fits (src/calc.py is there) or no file can be cited."""
    import json

    if (root / "src" / "calc.py").is_file():
        return None
    names = [*_GROUNDING, *sorted(p.name for p in root.iterdir() if not p.name.startswith("."))] \
        if root.is_dir() else []
    for rel in names:
        found = _first_line(root, rel)
        if found is None:
            continue
        n, text = found
        result = {"facts": [{"fact": f"{rel} begins with: {text}", "file_line": f"{rel}:{n}"}], "truncated": False}
        return Scenario.model_validate({
            "name": "explore-basic", "description": f"explore: reads {rel}, then cites its first line",
            "scripts": [
                {"match": {"mode": "explore"}, "turns": [
                    {"say": f"Let me look at {rel}.", "actions": [{"read": {"path": rel}}]},
                    {"say": f"{rel} begins with {text!r}.\n<!--RESULT-->{json.dumps(result)}<!--/RESULT-->"}]},
                {"turns": [{"say": "sim (explore-basic): this scenario only scripts explore-mode prompts."}]}]})
    return None
