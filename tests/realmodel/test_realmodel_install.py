"""scripts/install-model-server: the build is kept outside the checkout and reused; without it the
real-model tests fail (never skip) with one line naming the script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from modelserver import INSTALL, REPO_ROOT
from support import guard

pytestmark = pytest.mark.realmodel


def _script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=guard(60))


def test_the_build_lives_in_the_ci_cache_and_a_finished_one_is_reused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PILOTHOUSE_CI_CACHE"}
    where = _script("--where", env=env)
    assert where.returncode == 0, where.stderr
    assert re.fullmatch(re.escape(os.environ["XDG_CACHE_HOME"]) + r"/pilothouse-ci/model-server-[0-9a-f]{12}\n",
                        where.stdout), where.stdout
    env["PILOTHOUSE_CI_CACHE"] = str(tmp_path / "ci")
    dest = Path(_script("--where", env=env).stdout.strip())
    assert dest.parent == tmp_path / "ci" and dest.name == Path(where.stdout.strip()).name

    # a finished build (its stamp, its python, the model file it names) is used as it is
    (dest / "bin").mkdir(parents=True)
    (dest / "bin" / "python").symlink_to(sys.executable)
    gguf = dest / "lib" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    (dest / ".installed").write_text(f"pins=x\npython=3\ngguf={gguf}\n")
    before = sorted(p.relative_to(dest) for p in dest.rglob("*"))
    again = _script(env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(dest) and again.stderr == ""
    assert sorted(p.relative_to(dest) for p in dest.rglob("*")) == before
    assert not list((tmp_path / "ci").glob("*.build.log"))

    bad = _script("--rebuild", env=env)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "--where" in bad.stderr


def test_without_the_build_the_real_model_tests_fail_in_one_line_naming_the_script(tmp_path: Path) -> None:
    env = dict(os.environ, PILOTHOUSE_TEST_MODEL_SERVER=str(tmp_path / "no-build-here"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
                           "tests/realmodel/test_realmodel_dispatch.py::test_plan_verdict_is_honest"],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=guard(120))
    assert done.returncode == 1, done.stdout[-2000:]
    said = [line for line in done.stdout.splitlines() if "scripts/install-model-server" in line]
    assert said and all("run scripts/install-model-server" in line for line in said), done.stdout[-2000:]
    assert "Traceback" not in done.stdout and "skipped" not in done.stdout
    assert re.search(r"\b1 error\b", done.stdout.splitlines()[-1]), done.stdout[-500:]
