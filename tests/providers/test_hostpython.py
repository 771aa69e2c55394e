"""Host-side Python processes start isolated: a module a worker planted in its worktree, or one
merged into the operator's checkout, is never imported outside the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.supervisor import control as supervisor_ctl
from pilothouse.providers.hostpython import host_env, python_argv
from support import guard

# A shadow module as an attacker writes it: it records that it ran (the operator's user, outside
# the sandbox), then hands over the real module so nothing else looks wrong.
SHADOW = '''import os, sys
with open({marker!r}, "a") as fh:
    fh.write(f"{{os.getpid()}} imported {{__name__}} from {{__file__}}\\n")
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules[__name__]
import importlib
sys.modules[__name__] = importlib.import_module(__name__)
'''


def _scenario(marker: Path) -> dict[str, object]:
    done = ('<!--RESULT-->{"status":"complete","files_changed":["yaml.py","sqlite3.py"],'
            '"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->')
    shadow = SHADOW.format(marker=str(marker))
    return {"name": "shadow-modules", "description": "a builder plants yaml.py and sqlite3.py in its worktree",
            "scripts": [
                {"match": {"mode": "plan"}, "turns": [{"say": '<!--RESULT-->{"tasks":[{"id":"shadow","title":"Shadow",'
                                                              '"kind":"SAFE_PARALLEL","expected_paths":{"write":'
                                                              '["yaml.py","sqlite3.py"]}}]}<!--/RESULT-->'}]},
                {"match": {"mode": "code"}, "turns": [
                    {"say": "Adding two helpers.", "actions": [{"write": {"path": "yaml.py", "content": shadow}},
                                                               {"write": {"path": "sqlite3.py", "content": shadow}}]},
                    {"say": done}]},
                {"match": {"mode": "review"}, "turns": [{"say": '<!--RESULT-->{"overall":"PASS","findings":[]}<!--/RESULT-->'}]},
            ]}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_modules_a_builder_plants_run_in_neither_the_next_dispatch_nor_the_supervisor(tmp_path: Path, cli) -> None:
    marker = tmp_path / "shadow-ran.txt"
    scenario = tmp_path / "shadow.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(marker)))
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    # every task reviewed: the reviewer's dispatch starts in the builder's worktree, shadows and all
    data.update(gates={"fast": "true", "full": "true"}, workflow={"mode": "feature", "review": "ai"})
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    assert "yaml.py" in _git(layout.root, "ls-tree", "--name-only", "pilothouse/integration/demo")
    assert not marker.exists(), marker.read_text()

    # the operator merges the job into their checkout: the next supervisor starts from there
    _git(layout.root, "merge", "-q", "--no-edit", "pilothouse/integration/demo")
    assert (layout.root / "sqlite3.py").is_file()
    supervisor_ctl.start(layout)
    supervisor_ctl.stop(layout)
    assert not marker.exists(), marker.read_text()


def test_a_host_python_gets_no_code_path_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "json.py").write_text("raise SystemExit('planted module ran')\n")
    (tmp_path / "sqlite3.py").write_text("raise SystemExit('planted module ran')\n")
    env = host_env({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "planted"), "HOME": str(tmp_path)})
    assert "PYTHONPATH" not in env and env["HOME"] == str(tmp_path)
    out = subprocess.run(python_argv("-c", "import json, sqlite3, sys; print(sys.flags.isolated)"), cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(tmp_path / "planted")}, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    assert python_argv("-m", "x")[:2] == [sys.executable, "-I"]


def test_python_m_pilothouse_drops_its_working_directory_before_any_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "yaml.py").write_text("raise SystemExit('planted yaml ran')\n")
    out = subprocess.run([sys.executable, "-m", "pilothouse", "status"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=guard(60))
    assert "planted yaml ran" not in out.stdout + out.stderr


def test_only_the_working_directory_leaves_the_import_path(tmp_path: Path) -> None:
    # as `python -m pilothouse` starts in a worker's repository: its folder, by any spelling, goes;
    # every other entry (the standard library, site-packages) stays, in order
    code = ("import json, os, sys; from pilothouse.providers.hostpython import drop_cwd_from_path; "
            "sys.path[1:1] = ['.', os.getcwd(), os.getcwd() + '/']; before = list(sys.path); drop_cwd_from_path(); "
            "print(json.dumps([before, sys.path]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=guard(60))
    assert out.returncode == 0, out.stderr
    before, after = json.loads(out.stdout)
    assert after == [p for p in before if p not in ("", ".") and os.path.abspath(p) != os.path.realpath(tmp_path)]
    assert after and os.path.realpath(tmp_path) not in after and "" not in after and after == [p for p in before if p in after]
    assert len(after) == len(before) - 4, (before, after)


def test_a_host_python_carries_the_no_byte_code_choice_over_to_its_children(tmp_path: Path) -> None:
    # -I ignores PYTHONDONTWRITEBYTECODE: the child gets -B exactly when this process writes no byte code
    code = "import json; from pilothouse.providers.hostpython import python_argv; print(json.dumps(python_argv('-m', 'x')))"
    for flags, want in ((["-B"], ["-I", "-B", "-m", "x"]), ([], ["-I", "-m", "x"])):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        out = subprocess.run([sys.executable, *flags, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                             env=env, timeout=guard(60))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)[1:] == want, flags


def _planted(var: str, tmp: Path) -> tuple[str, list[str], str, str]:
    """(the value a worker gives `var`, the child's arguments, its stdin, what the child prints
    when it obeys the variable)."""
    ran = "import sys; sys.stdout.write('PLANTED RAN\\n')\n"
    v = sys.version_info
    if var == "PYTHONPATH":
        (tmp / "p").mkdir()
        (tmp / "p" / "json.py").write_text(ran)
        return str(tmp / "p"), ["-c", "import json"], "", "PLANTED RAN"
    if var == "PYTHONHOME":  # the standard library (site, encodings, …) read from the worker's folder
        (tmp / "home").mkdir()
        return str(tmp / "home"), ["-c", "import sys; print(sys.prefix)"], "", str(tmp / "home")
    if var == "PYTHONSTARTUP":
        (tmp / "startup.py").write_text(ran)
        return str(tmp / "startup.py"), ["-i"], "", "PLANTED RAN"
    if var == "PYTHONUSERBASE":
        site = tmp / "base" / "lib" / f"python{v.major}.{v.minor}" / "site-packages"
        site.mkdir(parents=True)
        (site / "usercustomize.py").write_text(ran)
        return str(tmp / "base"), ["-c", "pass"], "", "PLANTED RAN"
    if var == "PYTHONINSPECT":  # a child it reaches on a terminal runs what is typed after its command
        return "1", ["-c", "import sys; print('PLANTED', sys.flags.inspect)"], "", "PLANTED 1"
    if var == "PYTHONBREAKPOINT":  # breakpoint() runs a hook of the worker's choosing, from the cwd
        (tmp / "plant.py").write_text(f"def hook():\n    {ran}")
        return "plant.hook", ["-c", "breakpoint()"], "c\n", "PLANTED RAN"
    if var == "PYTHONPLATLIBDIR":  # the library looked for in another folder of the prefix
        return "planted", ["-c", "pass"], "", "Could not find platform"
    if var == "PYTHONSAFEPATH":
        return "1", ["-c", "import sys; print('PLANTED', sys.flags.safe_path)"], "", "PLANTED True"
    # PYTHONEXECUTABLE: only a macOS framework build reads it; the child must not even see it
    return str(tmp / "python"), ["-c", "import os; print('PLANTED', os.environ.get('PYTHONEXECUTABLE'))"], "", \
        f"PLANTED {tmp / 'python'}"


# CODE_VARS as hostpython documents it, written out: a name dropped from the module fails here
DOCUMENTED_CODE_VARS = ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
                        "PYTHONINSPECT", "PYTHONBREAKPOINT", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH"]


@pytest.mark.parametrize("var", DOCUMENTED_CODE_VARS)
def test_a_later_child_python_without_minus_i_never_obeys_a_code_variable_the_host_env_had(tmp_path, var):
    # the child is a Python of its own (a runner's, outside this venv: its user site is on) started
    # without -I: only host_env keeps the worker's value from it
    value, args, stdin, obeyed = _planted(var, tmp_path)
    given = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), var: value}

    def child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys._base_executable, *args], cwd=tmp_path, env=env, input=stdin, capture_output=True,
                              text=True, timeout=guard(60))

    plain = child(given)
    assert obeyed in plain.stdout + plain.stderr, (plain.stdout, plain.stderr)  # the plant works, passed on as is
    env = host_env(given)
    assert var not in env and env["HOME"] == str(tmp_path)
    out = child(env)
    assert out.returncode == 0 and obeyed not in out.stdout + out.stderr, (out.stdout, out.stderr)


def test_an_environment_handed_over_is_the_whole_of_the_childs_even_an_empty_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a caller that builds a child's environment itself (a minimal one, or none at all) gets that
    # and nothing of this process's: an empty one must not turn into the operator's whole environment
    monkeypatch.setenv("PILOTHOUSE_TEST_OPERATOR_ONLY", "operator")
    assert host_env({}) == {}
    assert host_env({"HOME": str(tmp_path), "PYTHONPATH": "/planted"}) == {"HOME": str(tmp_path)}
    child = subprocess.run([sys.executable, "-I", "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
                           env=host_env({}), capture_output=True, text=True, timeout=guard(60))
    assert "PILOTHOUSE_TEST_OPERATOR_ONLY" not in json.loads(child.stdout), child.stdout
