"""Tokens and money, read-only: what each run recorded (tokens, cost_usd from the provider's prices),
summed per provider, per job, per task and per role. A run still going counts what it has reported
so far. Every sum carries the label of its parts (measured, estimated, unknown: providers/usage.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pilothouse.core.queries.problems import StoreReader


@dataclass(frozen=True)
class Usage:
    key: str            # a provider, a job, or a task of the job asked about
    runs: int
    tokens: int
    cost_usd: float
    running: int = 0    # runs not finished yet: their share is still growing
    providers: tuple[str, ...] = ()  # whose runs they are: a cost of the simulator's says so (cost_label)
    usage: str = "measured"  # measured | estimated | unknown, the label of the sum

    @property
    def simulated(self) -> bool:
        """For a provider's row: the loopback simulator, whose runs are priced at nothing."""
        from pilothouse.providers.usage import is_simulator

        return is_simulator(self.key)


# whose runs a sum is of, and the usage labels of its parts (a run still going: measured so far)
_PROVIDERS = (" group_concat(DISTINCT provider) AS providers, group_concat(DISTINCT coalesce(CASE WHEN"
              " json_valid(verdict) THEN json_extract(verdict, '$.usage') END, CASE WHEN state = 'running'"
              " THEN 'measured' ELSE 'unknown' END)) AS labels")


def _providers(joined: str | None) -> tuple[str, ...]:
    return tuple(p for p in (joined or "").split(",") if p)


def _label(joined: str | None) -> str:
    from pilothouse.providers.usage import combine

    return combine(str(joined or "").split(","))


def _rows(reader: StoreReader, column: str, where: str = "", params: tuple[str, ...] = ()) -> list[Usage]:
    sql = (f"SELECT {column} AS key, count(*) AS runs, coalesce(sum(tokens), 0) AS tokens,"
           f" coalesce(sum(cost_usd), 0) AS cost, sum(state = 'running') AS running,{_PROVIDERS}"
           f" FROM runs WHERE {column} IS NOT NULL {where} GROUP BY {column} ORDER BY {column}")
    return [Usage(str(r["key"]), int(r["runs"]), int(r["tokens"]), float(r["cost"]), int(r["running"] or 0),
                  _providers(r["providers"]), _label(r["labels"])) for r in reader._all(sql, params)]


def by_provider(reader: StoreReader) -> list[Usage]:
    return _rows(reader, "provider")


def by_job(reader: StoreReader) -> list[Usage]:
    return _rows(reader, "job")


def by_task(reader: StoreReader, job: str) -> list[Usage]:
    """The job's tasks; its assigner and combined review (no task) are the row `(job)`."""
    rows = _rows(reader, "task", "AND job = ?", (job,))
    own = [Usage("(job)", int(r["runs"]), int(r["tokens"]), float(r["cost"]), int(r["running"] or 0),
                 _providers(r["providers"]), _label(r["labels"]))
           for r in reader._all("SELECT count(*) AS runs, coalesce(sum(tokens), 0) AS tokens,"
                                f" coalesce(sum(cost_usd), 0) AS cost, sum(state = 'running') AS running,{_PROVIDERS}"
                                " FROM runs WHERE job = ? AND task IS NULL", (job,)) if r["runs"]]
    return own + rows


# where a job's tokens go, in the order a job spends them; `retries` are fresh builder runs after the
# first attempt, `resumes` builder sessions continued (a hint, a request for more files)
ROLES = ("planner", "builders", "retries", "resumes", "reviewers", "testers")
_ROLE_SQL = ("CASE WHEN role = 'assigner' THEN 'planner'"
             " WHEN role = 'builder' AND mode = 'resume' THEN 'resumes'"
             " WHEN role = 'builder' AND attempt > 1 THEN 'retries'"
             " WHEN role = 'builder' THEN 'builders'"
             " WHEN role = 'reviewer' THEN 'reviewers'"
             " ELSE 'testers' END")


@dataclass(frozen=True)
class RoleUsage:
    role: str
    runs: int
    tokens: int
    cost_usd: float
    share: float        # of the job's counted tokens, 0..1
    usage: str          # measured | estimated | unknown, the label of the sum
    running: int = 0
    providers: tuple[str, ...] = ()


def by_role(reader: StoreReader, job: str) -> list[RoleUsage]:
    """The job's tokens by the role that spent them, largest share first among ROLES' order."""
    rows = reader._all(
        f"SELECT {_ROLE_SQL} AS role, count(*) AS runs, coalesce(sum(tokens), 0) AS tokens,"
        f" coalesce(sum(cost_usd), 0) AS cost, sum(state = 'running') AS running,{_PROVIDERS}"
        " FROM runs WHERE job = ? GROUP BY 1", (job,))
    total = sum(int(r["tokens"]) for r in rows) or 0
    found = {str(r["role"]): r for r in rows}
    out = []
    for role in ROLES:
        r = found.get(role)
        if r is None:
            continue
        out.append(RoleUsage(role, int(r["runs"]), int(r["tokens"]), float(r["cost"]),
                             int(r["tokens"]) / total if total else 0.0, _label(r["labels"]), int(r["running"] or 0),
                             _providers(r["providers"])))
    return out
