"""`.ai/project.yaml`: how pilothouse works in one repository (docs/project-yaml.md).

The file is the operator's: every field has a default except the gates, unknown keys are
refused (a typo must not silently turn a setting off), and a mistake is reported as one line
naming the file, the field, the line when known, and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project_env import RaySettings, SandboxSettings, SetupStep, Strict
from pilothouse.providers.errors import UserError, single_line
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

PROTECTED_BRANCHES = ("main", "master")
DEFAULT_INTEGRATION_BRANCH = "pilothouse/integration"
Complexity = Literal["easy", "standard", "complex"]
COMPLEXITIES: tuple[str, ...] = ("easy", "standard", "complex")


class Workflow(Strict):
    mode: Literal["feature", "separate-tasks"] = "feature"
    review: Literal["ai", "once", "off", "human"] = "once"

    @field_validator("review", mode="before")
    @classmethod
    def _review_off(cls, v: Any) -> Any:
        # `review: false` (or `off` read by a YAML 1.1 tool) means the word
        return "off" if v is False else v


class Roles(Strict):
    """Exact pins for the control roles, as `provider` or `provider/model`."""

    coordinator: str | None = None
    reviewer: str | None = None


def _all_complexities() -> list[Complexity]:
    return ["easy", "standard", "complex"]


class Assignment(Strict):
    provider: str
    model: str | None = None
    fallbacks: list[str] = Field(default_factory=list)
    complexity: list[Complexity] = Field(default_factory=_all_complexities)
    modes: list[str] = Field(default_factory=list)


class ModelPolicy(Strict):
    roles: Roles = Field(default_factory=Roles)
    assignments: dict[str, Assignment] = Field(default_factory=dict)
    default_assignment: str | None = None

    @model_validator(mode="after")
    def _default_is_defined(self) -> ModelPolicy:
        if self.default_assignment is not None and self.default_assignment not in self.assignments:
            known = ", ".join(sorted(self.assignments)) or "none defined"
            raise ValueError(f"default_assignment '{self.default_assignment}' is not one of "
                             f"model_policy.assignments ({known})")
        for name, a in self.assignments.items():
            for fb in a.fallbacks:
                if fb not in self.assignments:
                    raise ValueError(f"assignments.{name}.fallbacks names '{fb}', which is not an assignment")
        return self


class Budgets(Strict):
    job_tokens: int | None = Field(default=None, ge=1)


def split_provider(spec: str) -> tuple[str, str | None]:
    """`provider[/model]` -> (provider, model or None)."""
    provider, _, model = spec.partition("/")
    return provider, (model or None)


# under `gates:` beside the gate commands: not commands, the defences of the gates (docs/gates.md)
GATE_SETTINGS = ("protected", "holdout")
DEFAULT_PROTECTED = ("**/conftest.py", "pytest.ini", "tox.ini", "setup.cfg", ".coveragerc", "jest.config.*",
                     "vitest.config.*", ".github/workflows", ".gitlab-ci.yml")


class ProjectConfig(Strict):
    workflow: Workflow = Field(default_factory=Workflow)
    gates: dict[str, str]
    # gates.protected: globs (from the checkout's root) mounted read-only in every builder's sandbox
    protected: list[str] = Field(default_factory=list)
    # gates.holdout: a folder of tests outside every worker's sandbox, added when the gate runs
    holdout: str | None = None
    # a command, or {run, cache: {key, paths}}: its result kept per lockfile content (core/git/setup_cache.py)
    setup: list[str | SetupStep] = Field(default_factory=list)
    model_policy: ModelPolicy = Field(default_factory=ModelPolicy)
    budgets: Budgets = Field(default_factory=Budgets)
    hotspots: list[str] = Field(default_factory=list)
    contracts: list[str] = Field(default_factory=list)
    integration_branch: str = DEFAULT_INTEGRATION_BRANCH
    # where jobs start from and `ship` puts accepted work; None: the branch checked out in the
    # operator's checkout when the job starts
    base_branch: str | None = None
    max_workers: int = Field(default=2, ge=1, le=64)
    # workers yield the CPU to the supervisor (whose gates and merges every dependent task waits
    # for) and to the operator's own shell; 0 runs them at the supervisor's priority
    worker_nice: int = Field(default=19, ge=0, le=19)
    # merged tasks' checkouts kept for the next tasks (core/git/pool.py); 0 makes a new one each time
    worktree_pool: int = Field(default=4, ge=0, le=64)
    confinement: Literal["on", "off"] = "on"
    network: Literal["default", "none"] = "default"
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    availability_poll_seconds: int = Field(default=300, ge=10)
    sim_scenario: str | None = None
    # where dispatches run: this machine, or a Ray cluster (core/executor/, docs/executors.md)
    executor: Literal["local", "ray"] = "local"
    ray: RaySettings = Field(default_factory=RaySettings)

    @model_validator(mode="before")
    @classmethod
    def _gate_settings(cls, data: Any) -> Any:
        # `gates.protected` / `gates.holdout` sit with the gates in the file, apart in the model
        if isinstance(data, dict) and isinstance(data.get("gates"), dict):
            gates = dict(data["gates"])
            data = {**data, **{k: gates.pop(k) for k in GATE_SETTINGS if k in gates}, "gates": gates}
        return data

    @model_validator(mode="after")
    def _ray_address(self) -> ProjectConfig:
        if self.executor == "ray" and not self.ray.address:
            raise ValueError("executor: ray needs ray.address, the cluster's head as host:port (say 127.0.0.1:6379)")
        return self

    @field_validator("protected")
    @classmethod
    def _protected(cls, v: list[str]) -> list[str]:
        for g in v:
            if not g.strip() or g.startswith("/") or ".." in Path(g).parts:
                raise ValueError(f"gates.protected: {g!r} must be a glob inside the repository (say tests/**)")
        return v

    @field_validator("holdout")
    @classmethod
    def _holdout(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v.startswith("/") or ".." in Path(v).parts or v.strip("/") in ("", ".")):
            raise ValueError(f"gates.holdout: {v!r} must be a folder inside the main checkout (say .holdout)")
        return v.strip("/") if v else v

    @field_validator("confinement", mode="before")
    @classmethod
    def _yaml_booleans(cls, v: Any) -> Any:
        # YAML 1.1 reads a bare `on`/`off` as a boolean
        if v is True:
            return "on"
        if v is False:
            return "off"
        return v

    @field_validator("gates")
    @classmethod
    def _gates(cls, v: dict[str, str]) -> dict[str, str]:
        missing = [g for g in ("fast", "full") if not (v.get(g) or "").strip()]
        if missing:
            raise ValueError(f"gates must define {' and '.join(missing)} (a command each; they may be the same)")
        for name, cmd in v.items():
            if not isinstance(cmd, str) or not cmd.strip():
                raise ValueError(f"gate '{name}' needs a command string")
            if "\0" in cmd:
                raise ValueError(f"gate '{name}' has a NUL byte: a command cannot carry one; remove it")
        return {k: c.strip() for k, c in v.items()}

    @field_validator("setup")
    @classmethod
    def _setup(cls, v: list[str | SetupStep]) -> list[str | SetupStep]:
        for i, step in enumerate(v):
            cmd = step if isinstance(step, str) else step.run
            if "\0" in cmd:
                raise ValueError(f"command {i + 1} has a NUL byte: a command cannot carry one; remove it")
        return v

    @field_validator("integration_branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        v = v.strip()
        if v in PROTECTED_BRANCHES:
            raise ValueError(f"'{v}' is protected: pilothouse merges only into its own branch, e.g. "
                             f"'{DEFAULT_INTEGRATION_BRANCH}'")
        if not v or v.startswith(("-", "/")) or ".." in v or " " in v or v.endswith((".lock", "/")):
            raise ValueError(f"'{v}' is not a valid branch name")
        return v

    @field_validator("base_branch")
    @classmethod
    def _base(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip()
        if not v or v.startswith(("-", "/")) or ".." in v or " " in v or v.endswith((".lock", "/")):
            raise ValueError(f"'{v}' is not a valid branch name")
        return v

    @model_validator(mode="after")
    def _base_is_not_integration(self) -> ProjectConfig:
        if self.base_branch is not None and (self.base_branch == self.integration_branch
                                             or self.base_branch.startswith(self.integration_branch + "/")):
            raise ValueError(f"base_branch '{self.base_branch}' is integration_branch '{self.integration_branch}' or "
                             "one of its job lines: jobs start from the base branch and merge into lines of their "
                             "own under the integration branch, so they must differ")
        return self

    @field_validator("hotspots", "contracts")
    @classmethod
    def _relative(cls, v: list[str]) -> list[str]:
        for p in v:
            if p.startswith("/") or ".." in Path(p).parts:
                raise ValueError(f"'{p}' must be a path inside the repository (relative, no '..')")
        return v

    def role_pin(self, role: Literal["coordinator", "reviewer"]) -> tuple[str, str | None] | None:
        spec = getattr(self.model_policy.roles, role)
        return split_provider(spec) if spec else None


# ---------------------------------------------------------------- loading


def _yaml_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc`, or of its deepest existing parent."""
    import yaml

    try:
        node: Any = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, value in node.value:
                if k.value == str(key):
                    line, node = k.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _did_you_mean(model: Any, loc: tuple[Any, ...]) -> str:
    """' (did you mean X?)' for an unknown key at `loc` of `model`, or ''."""
    import difflib

    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None:
            return ""
    close = difflib.get_close_matches(str(loc[-1]), list(getattr(model, "model_fields", {})), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def format_validation_error(exc: ValidationError, file: str, text: str | None = None,
                            model: Any = None) -> str:
    """One line for the first problem (plus a count of the rest); `model` (the root) lets an
    unknown key get a did-you-mean."""
    errors = exc.errors()
    err = errors[0]
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
    field = ".".join(str(x) for x in loc) or "(top level)"
    kind = err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        msg = "unknown key: remove it or check its spelling" + (_did_you_mean(model, loc) if model else "")
    elif kind == "missing":
        msg = "required: add it"
    elif kind == "literal_error":
        msg = f"{msg} (got {err.get('input')!r})"
    line = _yaml_line(text, loc) if text is not None else None
    where = f"{file}:{line}" if line else file
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return single_line(f"{where}: {field}: {msg}{more}")


def parse_yaml(text: str, file: str) -> Any:
    """The user's YAML: depth and aliases bounded, duplicate keys refused, only true/false are
    booleans (so `review: off` is the word); every mistake one UserError naming file and line."""
    from pilothouse.providers.userfile import load_yaml

    return load_yaml(text, file)


def load_project(layout: RepoLayout) -> ProjectConfig:
    """The project's settings, from the main checkout (see layout.main_layout)."""
    from pilothouse.core.records.layout import main_layout, read_text

    file = ".ai/project.yaml"
    layout = main_layout(layout)
    try:
        text = read_text(layout.project_yaml, f"{layout.project_yaml}",
                         not_text_fix="save it as UTF-8 (or re-run `pilothouse init --force`)")
    except FileNotFoundError:
        raise UserError(f"{layout.root}: no {file}: run `pilothouse init` in the repository") from None
    data = parse_yaml(text, file)
    if not isinstance(data, dict):
        raise UserError(f"{file}: expected a mapping of settings (workflow, gates, ...): "
                        "fix the file or re-run `pilothouse init`")
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, file, text, ProjectConfig)) from None


# ---------------------------------------------------------------- init

def detect_gates(root: Path) -> dict[str, str] | None:
    """The repository's own test command as gates (core/records/detect.py says how it is found)."""
    from pilothouse.core.records.detect import detect

    found = detect(root)
    return found.gates() if found is not None else None


SIM_POLICY = """model_policy:              # the simulator: scripted replies, not a real model (no key was configured)
  roles: {coordinator: sim, reviewer: sim}   # name real providers here once you store a key (pilothouse key set glm)
  assignments:
    simulator: {provider: sim}               # script it for your repository: docs/scenarios.md (sim_scenario)"""


_EMPTY_POLICY = """model_policy:
  roles: {}            # coordinator / reviewer: "provider" or "provider/model"
  assignments: {}      # name: {provider, model, fallbacks, complexity, modes}"""


def render_project(gates: dict[str, str], share: list[str] | None = None, *, sim_roles: bool = False) -> str:
    """The commented project.yaml `init` writes (values quoted so YAML keeps them strings).
    `sim_roles`: every role on the simulator, so a job runs at once where no model key is configured."""
    import json

    q = json.dumps  # a JSON string is a valid double-quoted YAML scalar
    protected = "\n".join(f"    - {q(g)}" for g in DEFAULT_PROTECTED)
    return f"""# pilothouse project settings (commit this file). Reference: pilothouse init --help
workflow:
  mode: feature        # feature | separate-tasks
  review: once         # ai (every task) | once (the combined change) | off | human
gates:                 # commands that must pass; they must not change committed files
  fast: {q(gates["fast"])}
  full: {q(gates["full"])}
  protected:           # read-only for builders (their writes fail in the sandbox): test settings, CI
{protected}
setup: []              # commands run once in each new worktree (e.g. "npm ci"; {{run, cache: {{key, paths}}}} keeps its result per lockfile)
{SIM_POLICY if sim_roles else _EMPTY_POLICY}
budgets:
  job_tokens: null     # stop launching new work for a job past this many tokens
hotspots: []           # paths one task at a time may write
contracts: []          # shared interfaces; change them in CONTRACT_CHANGE tasks
integration_branch: {q(DEFAULT_INTEGRATION_BRANCH)}
base_branch: null      # jobs start from its head; `pilothouse ship` lands work there (null: your checked-out branch)
max_workers: 2
worker_nice: 19        # 0-19: CPU priority of workers below the supervisor's gates and merges
worktree_pool: 4       # merged tasks' checkouts reused by the next tasks (0: a new checkout each time)
confinement: "on"
network: default       # default | none
sandbox:
  read: []             # paths bound read-only into every sandbox, e.g. [/opt/toolchain] (docs/sandbox.md)
  share: {q(share or [])}{" " * max(1, 13 - len(q(share or [])))}# the checkout's dependency folders every worktree uses read-only, e.g. [".venv", "node_modules"]
availability_poll_seconds: 300
"""


def job_token_cap(layout: RepoLayout) -> int | None:
    return load_project(layout).budgets.job_tokens
