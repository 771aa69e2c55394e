"""A cluster run's verdict comes from another machine: core/executor/landing.py rebuilds it from
the fields a verdict has and judges its claims again against the work that arrived."""

from __future__ import annotations

import json
from pathlib import Path

from pilothouse.core.dispatch import runs
from pilothouse.core.executor import landing
from pilothouse.providers.redact import Redactor

SECRET = "sk-test-" + "5e" * 16


def _launch(mode: str = "code") -> runs.Launch:
    return runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode=mode,
                       workdir="/nowhere", task_text="task: t\n")


def _verdict(result: dict[str, object] | None, **fields: object) -> dict[str, object]:
    return {"verdict": "completed", "parse_state": "parsed" if result is not None else "unstructured",
            "result": result, **fields}


def _code(files: list[str]) -> dict[str, object]:
    return {"status": "complete", "files_changed": files, "validation": {"commands": [], "passed": True},
            "risks": []}


def _vet(raw: object, changed: list[str] | None, mode: str = "code") -> dict[str, object] | None:
    return landing.vet_verdict(raw, _launch(mode), changed, Redactor([SECRET]).redact)


def test_a_verdict_claiming_files_the_run_did_not_change_is_judged_as_dispatch_judges_it() -> None:
    v = _vet(_verdict(_code(["src/slug.py", "src/calc.py"])), ["src/slug.py"])
    assert v is not None
    assert (v["verdict"], v["reason"]) == (
        "partial", "files_changed names src/calc.py, which the run did not change (it changed src/slug.py)")
    v = _vet(_verdict(_code(["src/slug.py"])), [])
    assert v is not None and v["verdict"] == "empty"
    v = _vet(_verdict(_code(["src/slug.py"])), ["src/slug.py"])
    assert v is not None and (v["verdict"], v["parse_state"]) == ("completed", "parsed")


def test_a_forged_result_block_is_parsed_again() -> None:
    v = _vet(_verdict({"status": "complete"}), ["a.py"])  # no files_changed, no validation
    assert v is not None and (v["verdict"], v["parse_state"], v["result"]) == ("partial", "malformed", None)
    v = _vet(_verdict(None), ["a.py"])
    assert v is not None and v["verdict"] == "partial" and "without a valid result block" in str(v["reason"])


def test_the_node_names_neither_the_run_nor_its_files_and_keys_are_redacted() -> None:
    raw = _verdict(_code(["a.py"]), run_id="r-other", provider="openai", final_text_path="/etc/shadow",
                   error=f"boom {SECRET}", tokens={"input": 5, "output": "lots"}, cost_usd=-3, exit_code=True,
                   quota={"reset_at": "never"}, timed_out="yes")
    v = _vet(raw, ["a.py"])
    assert v is not None
    assert (v["run_id"], v["provider"], v["mode"]) == ("r-1", "sim", "code")
    assert "final_text_path" not in v and v["quota"] is None
    assert SECRET not in json.dumps(v)
    assert v["tokens"] == {"input": 5} and v["cost_usd"] is None and v["exit_code"] is None
    assert v["timed_out"] is False


def test_no_verdict_worth_the_name_is_none() -> None:
    for raw in (None, [], "completed", {"verdict": "triumphant"}, {"verdict": None}):
        assert _vet(raw, []) is None


def test_only_json_event_lines_reach_the_local_log_redacted(isolated_home: Path) -> None:
    launch = _launch()
    text = f'{{"kind": "text", "text": "{SECRET}"}}\nnot json\n[1, 2]\n{{"kind": "usage", "input": 3}}\n'
    landing.write_log(launch, text, Redactor([SECRET]).redact)
    lines = runs.provider_logs("sim", "r-1")["jsonl"].read_text().splitlines()
    assert len(lines) == 2 and SECRET not in "".join(lines)
    assert json.loads(lines[1]) == {"kind": "usage", "input": 3}
