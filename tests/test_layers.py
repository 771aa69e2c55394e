"""The layering rule: tui → core → providers. core and providers never import Textual;
providers never imports core; the CLI's --help path imports nothing heavy."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules(package: str) -> list[str]:
    pkg_dir = ROOT / package
    names = [f"pilothouse.{package}"]
    for info in pkgutil.walk_packages([str(pkg_dir)], prefix=f"pilothouse.{package}."):
        names.append(info.name)
    return names


def _loaded_after_import(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("package", ["core", "providers"])
def test_core_and_providers_never_import_textual(package: str) -> None:
    loaded = _loaded_after_import(_modules(package))
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)


def test_providers_never_import_core() -> None:
    loaded = _loaded_after_import(_modules("providers"))
    assert not any(m.startswith("pilothouse.core") for m in loaded), sorted(
        m for m in loaded if m.startswith("pilothouse.core"))


def test_cli_help_imports_nothing_heavy() -> None:
    code = (
        "import sys, json, contextlib, io\n"
        "from pilothouse.core import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        cli.main(['--help'])\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    heavy = {"textual", "git", "pydantic", "keyring", "httpx", "watchfiles", "yaml", "rich"}
    assert not (heavy & loaded), sorted(heavy & loaded)


def test_import_contracts_hold() -> None:
    """pyproject.toml's [tool.importlinter] contracts: the layers, core's package order, no circle
    between siblings, no private module reached from outside its package."""
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), "import-linter is a dev dependency: pip install -e '.[dev]'"
    out = subprocess.run([str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_no_folder_in_core_holds_more_than_fifteen_modules() -> None:
    crowded = {str(d.relative_to(ROOT)): n for d in [ROOT / "core", *(ROOT / "core").rglob("*/")]
               if d.is_dir() and "__pycache__" not in d.parts
               and (n := len([f for f in d.glob("*.py") if f.name != "__init__.py"])) > 15}
    assert not crowded, crowded
