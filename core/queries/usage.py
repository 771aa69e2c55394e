"""Tokens and money, read-only: what each run recorded (tokens, cost_usd from the provider's prices),
summed per provider, per job and per task. A run still going counts what it has reported so far.
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

    @property
    def simulated(self) -> bool:
        """For a provider's row: the loopback simulator, whose runs are priced at nothing."""
        return self.key == "sim" or self.key.startswith("sim-")


def _rows(reader: StoreReader, column: str, where: str = "", params: tuple[str, ...] = ()) -> list[Usage]:
    sql = (f"SELECT {column} AS key, count(*) AS runs, coalesce(sum(tokens), 0) AS tokens,"
           " coalesce(sum(cost_usd), 0) AS cost, sum(state = 'running') AS running"
           f" FROM runs WHERE {column} IS NOT NULL {where} GROUP BY {column} ORDER BY {column}")
    return [Usage(str(r["key"]), int(r["runs"]), int(r["tokens"]), float(r["cost"]), int(r["running"] or 0))
            for r in reader._all(sql, params)]


def by_provider(reader: StoreReader) -> list[Usage]:
    return _rows(reader, "provider")


def by_job(reader: StoreReader) -> list[Usage]:
    return _rows(reader, "job")


def by_task(reader: StoreReader, job: str) -> list[Usage]:
    """The job's tasks; its assigner and combined review (no task) are the row `(job)`."""
    rows = _rows(reader, "task", "AND job = ?", (job,))
    own = [Usage("(job)", int(r["runs"]), int(r["tokens"]), float(r["cost"]), int(r["running"] or 0))
           for r in reader._all("SELECT count(*) AS runs, coalesce(sum(tokens), 0) AS tokens,"
                                " coalesce(sum(cost_usd), 0) AS cost, sum(state = 'running') AS running"
                                " FROM runs WHERE job = ? AND task IS NULL", (job,)) if r["runs"]]
    return own + rows
