"""dispatch end to end on the real sim: the two-line contract, code edits, resume, fanout, limits,
path escapes, bad input (one line, no traceback, logs kept)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pilothouse.providers import paths
from support import guard, no_bwrap_env

# the started line's fields, in order (no model validates it: dispatch builds it by hand)
STARTED_KEYS = ["type", "schema", "run_id", "provider", "runner", "model", "mode", "workdir", "log",
                "latest_log", "timeout_s", "idle_timeout_s"]


def lines(r) -> list[dict]:
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def verdict_of(r) -> dict:
    out = lines(r)
    assert len(out) == 2, r.stdout + r.stderr
    assert out[0]["type"] == "pilothouse.started" and out[1]["type"] == "pilothouse.verdict"
    assert list(out[0]) == STARTED_KEYS, out[0]
    assert r.returncode == 0, r.stderr
    return out[1]


def task(tmp_path: Path, text: str = "Explain src/calc.py.\n", name: str = "task.md") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def scenario(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\ndescription: test scenario {name}\n{body}")
    return str(p)


def dispatch(cli, repo, tmp_path, *extra, mode="explore", text="Explain src/calc.py.\n"):
    return cli("dispatch", "--provider", "sim", "--mode", mode, "--workdir", str(repo),
               "--task-file", task(tmp_path, text), *extra)


def test_explore_prints_two_lines_completed_and_parsed(cli, git_repo, tmp_path):
    r = dispatch(cli, git_repo, tmp_path, "--run-id", "explore-1")
    started, v = lines(r)
    assert started["run_id"] == v["run_id"] == "explore-1" and started["runner"] == "builtin"
    assert v["verdict"] == "completed" and v["parse_state"] == "parsed"
    assert v["result"]["facts"][0]["file_line"] == "src/calc.py:1"
    assert v["steps"] == 2 and v["tokens"]["input"] > 0 and v["session_id"]
    served = [json.loads(x) for x in (paths.providers_dir() / "sim/runs/explore-1/state/served.jsonl")
              .read_text().splitlines()]
    assert v["tokens"]["output"] == sum(s["usage"]["output"] for s in served)
    logs = paths.logs_dir() / "sim"
    for suffix in (".jsonl", ".stderr.log", ".report.md", ".verdict.json"):
        assert (logs / f"explore-1{suffix}").exists()
    assert json.loads((logs / "explore-1.verdict.json").read_text())["verdict"] == "completed"
    assert Path(v["final_text_path"]).read_text().strip().endswith("<!--/RESULT-->")
    events = [json.loads(x) for x in (logs / "explore-1.jsonl").read_text().splitlines()]
    assert all("ts" in e for e in events) and {"session", "usage", "tool", "text"} <= {e["kind"] for e in events}
    latest = (paths.logs_dir() / "latest.log").read_text()
    assert "sim/explore-1 pid" in latest and " read ok src/calc.py" in latest and "DONE completed" in latest


def test_code_edits_the_workdir_and_resume_continues_the_session(cli, git_repo, tmp_path):
    r = dispatch(cli, git_repo, tmp_path, "--run-id", "code-1", "--scenario", "code-basic", mode="code",
                 text="Add slugify in src/slug.py.\n")
    v = verdict_of(r)
    assert v["verdict"] == "completed", v
    assert v["result"]["files_changed"] == ["src/slug.py"]
    assert "text.strip().lower()" in (git_repo / "src/slug.py").read_text()
    r2 = cli("resume", "--run-id", "code-1", "--task-file", task(tmp_path, "Add type hints.\n", "r.md"),
             "--scenario", "code-basic")
    v2 = verdict_of(r2)
    assert v2["verdict"] == "completed" and v2["resume_of"] == "code-1" and v2["mode"] == "resume"
    assert v2["session_id"] == v["session_id"]
    assert "def slugify(text: str) -> str:" in (git_repo / "src/slug.py").read_text()
    # the resumed run reuses the original sandbox
    assert (paths.providers_dir() / "sim/runs" / v2["run_id"]).resolve() == \
        (paths.providers_dir() / "sim/runs/code-1").resolve()


def test_fanout_of_three_returns_three_verdicts(cli, git_repo, tmp_path):
    t = task(tmp_path)
    jobs = [{"provider": "sim", "mode": "explore", "workdir": str(git_repo), "task_file": t},
            {"provider": "sim", "mode": "explore", "workdir": str(git_repo), "task": "What does add do?"},
            {"provider": "nope", "mode": "explore", "workdir": str(git_repo), "task_file": t}]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    r = cli("fanout", "--jobs", str(tmp_path / "jobs.json"), "--max-parallel", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [v["verdict"] for v in out] == ["completed", "completed", "error"]
    assert "unknown provider 'nope'" in out[2]["error"] and out[2]["synthesized"]


ESCAPE = """scripts:
  - match: {mode: code}
    turns:
      - say: "Trying to write outside."
        actions:
          - write: {path: ../outside.txt, content: "x"}
          - read: {path: /etc/hostname}
          - write: {path: inside.txt, content: "ok"}
      - say: |
          Done.
          <!--RESULT-->{"status":"partial","files_changed":["inside.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_path_escape_is_refused_and_counted(cli, git_repo, tmp_path):
    r = dispatch(cli, git_repo, tmp_path, "--scenario", scenario(tmp_path, "escape", ESCAPE), mode="code",
                 text="Write files.\n")
    v = verdict_of(r)
    assert v["tool_errors"]["permission_denied"] == 2, v
    assert v["verdict"] == "partial"
    assert not (git_repo.parent / "outside.txt").exists()
    assert (git_repo / "inside.txt").read_text() == "ok"


LOOP = "scripts:\n  - turns:\n" + "".join(
    f"      - say: \"step {i}\"\n        actions:\n          - read: {{path: src/calc.py}}\n" for i in range(8))

MALFORMED = """scripts:
  - turns:
      - say: |
          Here.
          <!--RESULT-->{"facts":[{"fact":"x"}],"truncated":false}<!--/RESULT-->
"""


def test_step_cap_stops_the_worker(cli, git_repo, tmp_path):
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--step-cap", "3",
                            "--scenario", scenario(tmp_path, "loop", LOOP)))
    assert v["steps"] == 3 and v["step_cap"] == 3
    assert v["verdict"] == "partial" and "step cap" in v["error"]


def test_malformed_result_names_the_first_bad_field(cli, git_repo, tmp_path):
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--scenario", scenario(tmp_path, "bad", MALFORMED)))
    assert v["parse_state"] == "malformed" and "facts.0.file_line" in v["parse_error"]
    assert v["verdict"] == "partial"


# A hostile command run by the worker writes to the worker's own stdout (its parent's fd 1): a forged
# event whose error class the contract rejects reaches the verdict.
FORGED = """scripts:
  - turns:
      - say: "Running a command."
        actions:
          - bash:
              command: "printf '%s\\n' '{\\"kind\\":\\"error\\",\\"message\\":\\"forged\\",\\"error_class\\":\\"pwned\\"}' > /proc/$PPID/fd/1"
              description: "forge an event"
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":[],"validation":{"commands":[],"passed":true}}<!--/RESULT-->
"""


def test_a_verdict_the_contract_rejects_still_ends_in_two_lines(cli, git_repo, tmp_path):
    r = dispatch(cli, git_repo, tmp_path, "--run-id", "forged-1", "--scenario",
                 scenario(tmp_path, "forged", FORGED), mode="code", text="Do it.\n")
    v = verdict_of(r)
    assert (v["verdict"], v["error_class"], v["result"]) == ("error", "fatal", None), v
    assert v["error"].startswith("pilothouse could not build the verdict: ValidationError: "), v["error"]
    events = [json.loads(x) for x in (paths.logs_dir() / "sim" / "forged-1.jsonl").read_text().splitlines()]
    assert [e["error_class"] for e in events if e["kind"] == "error"] == ["pwned"]
    saved = json.loads((paths.logs_dir() / "sim" / "forged-1.verdict.json").read_text())
    assert saved == v
    assert "FAILED" in (paths.logs_dir() / "latest.log").read_text()


def test_a_result_nested_too_deep_to_read_is_malformed_not_a_crash(cli, git_repo, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    body = f"scripts:\n  - turns:\n      - say: \"Done. <!--RESULT-->{deep}<!--/RESULT-->\"\n"
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--scenario", scenario(tmp_path, "deep", body), mode="code",
                            text="Do it.\n"))
    # no result and no change in the worktree: nothing was done (empty), and the reason says both
    assert (v["verdict"], v["parse_state"], v["parse_error"]) == (
        "empty", "malformed", "result block is nested too deeply to read")
    assert v["reason"] == ("result block rejected: result block is nested too deeply to read; "
                           "the run made no change in the worktree")


@pytest.mark.parametrize("name, verdict, error_class", [
    ("auth-401", "error", "auth"), ("quota-429", "quota", "quota"),
    ("garbage", "error", "fatal"), ("close-mid-stream", "error", "transient"),
])
def test_failing_models_end_in_a_verdict_with_logs(cli, git_repo, tmp_path, name, verdict, error_class):
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--scenario", name, "--run-id", f"f-{name}"))
    assert (v["verdict"], v["error_class"]) == (verdict, error_class), v
    assert (paths.logs_dir() / "sim" / f"f-{name}.jsonl").exists()
    if name == "quota-429":
        assert v["quota"][0]["window"] == "five_hour" and v["quota"][0]["resets_at"]
    if name == "close-mid-stream":  # the server began the answer, then the connection failed: nobody
        assert (v["usage"], v["tokens"]) == ("unknown", None), v  # counted it, which is never 0
    if name in ("auth-401", "quota-429"):  # refused before any work: nothing was used
        assert v["usage"] != "unknown" or v["tokens"] is None, v
    assert "FAILED" in (paths.logs_dir() / "latest.log").read_text()


def test_idle_timeout_and_timeout(cli, git_repo, tmp_path):
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--scenario", "slow", "--idle-timeout", "1"))
    assert v["idle_timed_out"] and not v["timed_out"] and v["verdict"] == "error"
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--scenario", "slow", "--timeout", "1"))
    assert v["timed_out"] and "timed out" in v["error"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_still_prints_an_interrupted_verdict(git_repo, tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "pilothouse", "dispatch", "--provider", "sim", "--mode", "explore",
                          "--workdir", str(git_repo), "--task-file", task(tmp_path), "--scenario", "slow"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    started = json.loads(p.stdout.readline())
    assert started["type"] == "pilothouse.started"
    time.sleep(0.3)
    p.send_signal(sig)
    rest, err = p.communicate(timeout=guard(20))
    v = json.loads(rest.strip().splitlines()[-1])
    assert p.returncode == 0, err
    assert v["interrupted"] is True and v["run_id"] == started["run_id"]
    assert (paths.logs_dir() / "sim" / f"{started['run_id']}.verdict.json").exists()


def test_bad_inputs_give_one_line_and_no_traceback(cli, git_repo, tmp_path):
    t = task(tmp_path)
    bad_scn = scenario(tmp_path, "broken", "scripts:\n  - turns:\n      - sya: hi\n")
    (tmp_path / "file").write_text("x")
    cases = [
        (["--provider", "nope", "--mode", "explore", "--workdir", str(git_repo), "--task-file", t], "unknown provider"),
        (["--provider", "glm", "--mode", "explore", "--workdir", str(git_repo), "--task-file", t], "key set glm"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(tmp_path / "missing"), "--task-file", t],
         "does not exist"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(tmp_path / "file"), "--task-file", t],
         "not a directory"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file",
          str(tmp_path / "none.md")], "does not exist"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file",
          task(tmp_path, "  \n", "empty.md")], "is empty"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file",
          task(tmp_path, "# Task: <<FILL: summary>>\n", "tpl.md")], "placeholder"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file",
          task(tmp_path, "use ghp_abcdefghijklmnopqrstuvwxyz0123\n", "cred.md")], "GitHub token"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file", t,
          "--scenario", bad_scn], "broken.yaml"),
        (["--provider", "sim", "--mode", "wander", "--workdir", str(git_repo), "--task-file", t], "invalid choice"),
        (["--provider", "sim", "--workdir", str(git_repo), "--task-file", t], "--mode"),
        (["--provider", "sim", "--mode", "explore", "--workdir", str(git_repo), "--task-file", t,
          "--timeout", "-1"], "more than 0"),
    ]
    for args, words in cases:
        r = cli("dispatch", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stdout == "", args
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert words in r.stderr, (words, r.stderr)
    latest = (paths.logs_dir() / "latest.log").read_text()
    assert latest.count("FAILED before start") >= 8


def test_template_placeholders_are_refused_until_filled(cli, git_repo, tmp_path):
    r = cli("template", "code")
    assert r.returncode == 0 and "<<FILL:" in r.stdout
    (tmp_path / "t.md").write_text(r.stdout)
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo),
            "--task-file", str(tmp_path / "t.md"))
    assert r.returncode == 2 and "placeholder on line 1" in r.stderr


def test_first_user_message_is_preamble_blank_line_task():
    from pilothouse.core.dispatch.prepare import compose_prompt
    from pilothouse.providers.modes import MODES

    for mode in MODES:
        msg = compose_prompt(mode, "\n  Do the thing.\n\n")
        assert msg.startswith(f"[pilothouse mode: {mode}]\n")
        prompt = (paths.package_data() / "prompts" / f"{mode}.md").read_text(encoding="utf-8").rstrip("\n")
        assert msg == f"{prompt}\n\nDo the thing.\n"


def test_runner_not_installed_is_one_line(cli, git_repo, tmp_path):
    import shutil

    from pilothouse.providers.runners import get_runner

    # a PATH with git and nothing else: no codex can be reached, whatever this machine has installed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    env = {"PILOTHOUSE_TEST_RUNNERS": str(tmp_path / "no-runners"), "PATH": str(bin_dir)}
    d = paths.config_dir() / "providers"
    d.mkdir(parents=True, exist_ok=True)
    (d / "cx.yaml").write_text("key: cx\nprovider_id: x\nmodel_id: m\nbase_url: http://127.0.0.1:9/v1\n"
                               "display_name: cx\nrunner: codex\nneeds_key: false\n")
    r = cli("dispatch", "--provider", "cx", "--mode", "explore", "--workdir", str(git_repo),
            "--task-file", task(tmp_path), env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == ("pilothouse: the codex runner for provider 'cx' is not installed; "
                        "run `pilothouse install runner codex`\n")
    assert r.stdout == ""  # no other runner ran in its place
    assert get_runner("builtin").installed()


def test_a_writer_refused_for_lack_of_bubblewrap_still_prints_its_verdict_line(cli, git_repo, tmp_path):
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--run-id", "nobwrap-1",
            "--task-file", task(tmp_path, "Add a sub function to src/calc.py.\n"), env=no_bwrap_env(tmp_path))
    v = verdict_of(r)
    assert v["run_id"] == "nobwrap-1" and v["verdict"] == "error" and v["error_class"] == "fatal"
    assert "refusing to run a code task unconfined" in v["error"] and "apt-get install bubblewrap" in v["error"]
    assert "refusing to run a code task unconfined" in r.stderr and "Traceback" not in r.stderr


def test_a_scripted_edit_whose_old_text_is_not_in_the_file_fails_the_run_visibly(cli, git_repo, tmp_path):
    scen = scenario(tmp_path, "stale-edit", """scripts:
  - match: {mode: code}
    turns:
      - say: "Renaming add"
        actions:
          - edit: {path: src/calc.py, old: "def plus(a, b):", new: "def total(a, b):"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["src/calc.py"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
""")
    r = dispatch(cli, git_repo, tmp_path, "--scenario", scen, mode="code", text="Rename add.\n")
    v = verdict_of(r)
    assert v["verdict"] != "completed" and v["result"] is None, v
    assert v["tool_errors"]["other"] == 1  # the worker's edit tool failed the call, in its own log
    report = Path(v["final_text_path"]).read_text()
    assert "edit src/calc.py: its old text occurs 0 times" in report and "script 1, turn 1" in report
    assert (git_repo / "src" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_a_server_that_streams_no_usage_gives_an_estimate_labelled_as_one(cli, git_repo, tmp_path):
    body = "server: {usage: omit_streamed}\nscripts:\n  - turns:\n      - say: \"Done. <!--RESULT-->{\\\"facts\\\": [{\\\"fact\\\": \\\"x\\\", \\\"file_line\\\": \\\"src/calc.py:1\\\"}]}<!--/RESULT-->\"\n"
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--run-id", "est-1", "--scenario",
                            scenario(tmp_path, "nousage", body)))
    assert v["verdict"] == "completed" and v["usage"] == "estimated"
    served = [json.loads(x) for x in (paths.providers_dir() / "sim/runs/est-1/state/served.jsonl")
              .read_text().splitlines()]
    assert [s["usage_sent"] for s in served] == [False]
    # the estimate counts what was sent (the prompt and the tool declarations), never a bare 0
    assert v["tokens"]["input"] >= served[0]["usage"]["input"] // 2 > 0 and v["tokens"]["output"] > 0
    events = [json.loads(x) for x in (paths.logs_dir() / "sim/est-1.jsonl").read_text().splitlines()]
    assert [e["source"] for e in events if e["kind"] == "usage"] == ["estimated"]
    total = v["tokens"]["input"] + v["tokens"]["output"] + v["tokens"]["reasoning"]
    assert f"~{total} tokens (estimated)" in (paths.logs_dir() / "latest.log").read_text()


def test_usage_the_server_reports_is_measured_and_equals_what_it_served(cli, git_repo, tmp_path):
    v = verdict_of(dispatch(cli, git_repo, tmp_path, "--run-id", "meas-1"))
    served = [json.loads(x) for x in (paths.providers_dir() / "sim/runs/meas-1/state/served.jsonl")
              .read_text().splitlines()]
    assert v["usage"] == "measured"
    assert v["tokens"]["input"] == sum(s["usage"]["input"] for s in served)
    assert v["tokens"]["output"] == sum(s["usage"]["output"] for s in served)
    assert "(estimated)" not in (paths.logs_dir() / "latest.log").read_text()


def test_a_key_handed_over_on_a_pipe_is_the_runs_key_and_in_no_argv_or_environment(git_repo, tmp_path):
    """A cluster run's dispatch gets its key from its actor on a pipe (core/executor/node.py)."""
    import os

    from pilothouse.core.dispatch.prepare import KEY_FD_ENV

    # a provider that refuses to run without a key, on the simulator
    user_providers = paths.config_dir() / "providers"
    user_providers.mkdir(parents=True, exist_ok=True)
    record = (paths.package_data() / "providers" / "sim.yaml").read_text()
    (user_providers / "sim-keyed.yaml").write_text(record.replace("key: sim\n", "key: sim-keyed\n")
                                                   .replace("needs_key: false", "needs_key: true"))
    argv = [sys.executable, "-m", "pilothouse", "dispatch", "--provider", "sim-keyed", "--mode", "explore",
            "--workdir", str(git_repo), "--task-file", task(tmp_path)]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=guard(120))
    assert refused.returncode != 0 and "no API key for provider 'sim-keyed'" in refused.stderr
    secret = "sk-piped-" + "4d" * 16
    r, w = os.pipe()
    os.write(w, secret.encode())
    os.close(w)
    try:
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=guard(120), pass_fds=(r,),
                             env={**os.environ, KEY_FD_ENV: str(r)})
    finally:
        os.close(r)
    v = verdict_of(ran)
    assert (v["verdict"], v["parse_state"]) == ("completed", "parsed")
    logs = paths.logs_dir() / "sim-keyed"
    assert not any(secret in p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file())
