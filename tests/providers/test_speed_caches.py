"""The on-disk caches that keep dispatch fast must never change an answer: the bwrap check is
re-run when the binary, the kernel or the namespace sysctls change (and never kept when it
failed); a cached scenario is validated again on every load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine import bwrap
from pilothouse.providers.errors import UserError
from pilothouse.providers.sim.scenario import load_scenario

GOOD_BWRAP = """#!/bin/sh
echo x >> "{calls}"
case "$1" in --version) echo 'bubblewrap 0.8.0';; --help) echo 'usage: --disable-userns';; *) exit 0;; esac
"""
BAD_BWRAP = """#!/bin/sh
echo x >> "{calls}"
case "$1" in --version) echo 'bubblewrap 0.8.0';; --help) echo usage;;
 *) echo 'bwrap: No permissions to creating new namespace' >&2; exit 1;; esac
"""


def _fake_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    fake = tmp_path / "bwrap"
    fake.write_text(text.format(calls=tmp_path / "calls"))
    fake.chmod(0o755)
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(fake))
    return fake


def _calls(tmp_path: Path) -> int:
    f = tmp_path / "calls"
    return len(f.read_text().splitlines()) if f.exists() else 0


def _fresh_process() -> None:
    """Forget what this process learnt, as a new dispatch process would."""
    bwrap._smoke.cache_clear()
    bwrap._smoke_cached.cache_clear()


def test_passed_bwrap_check_is_remembered_until_binary_or_kernel_change(tmp_path, monkeypatch):
    fake = _fake_bwrap(tmp_path, monkeypatch, GOOD_BWRAP)
    _fresh_process()
    assert confine.available() == (True, "")
    assert _calls(tmp_path) == 3  # --version, --help, the trial sandbox
    cached = json.loads((paths.cache_dir() / "bwrap-check.json").read_text())
    assert cached["key"][0] == str(fake) and os.uname().release in cached["key"]
    assert cached["disable_userns"] is True and cached["version"] == "0.8.0"

    _fresh_process()
    assert confine.available() == (True, "") and confine.bwrap_version() == "0.8.0"
    assert _calls(tmp_path) == 3  # from the cache: no bwrap started

    with open(fake, "a") as fh:  # a changed binary is checked again
        fh.write("# upgraded\n")
    _fresh_process()
    assert confine.available() == (True, "")
    assert _calls(tmp_path) == 6

    cached = json.loads((paths.cache_dir() / "bwrap-check.json").read_text())
    cached["key"][3] = "0.0.0-another-kernel"  # as after a reboot into another kernel
    (paths.cache_dir() / "bwrap-check.json").write_text(json.dumps(cached))
    _fresh_process()
    assert confine.available() == (True, "")
    assert _calls(tmp_path) == 9


def test_failed_bwrap_check_is_never_remembered(tmp_path, monkeypatch):
    fake = _fake_bwrap(tmp_path, monkeypatch, BAD_BWRAP)
    _fresh_process()
    ok, reason = confine.available()
    assert not ok and "No permissions to creating new namespace" in reason and "sysctl" in reason
    assert not (paths.cache_dir() / "bwrap-check.json").exists()
    # the admin fixes the namespaces (same binary, same kernel): the next dispatch sees it at once
    fake.write_text(GOOD_BWRAP.format(calls=tmp_path / "calls"))
    _fresh_process()
    assert confine.available() == (True, "")


SCENARIO = """name: cached
description: a scenario for the cache test
scripts:
  - match: {mode: explore}
    turns:
      - say: "hello"
"""


def _cache_files() -> list[Path]:
    return sorted((paths.cache_dir() / "scenarios").glob("*.json"))


def test_cached_scenario_is_still_validated(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    first = load_scenario(str(path))
    (entry,) = _cache_files()
    again = load_scenario(str(path))
    assert again.model_dump() == first.model_dump() and again.source == str(path)

    # a cache entry that no longer validates (stamp still matching) fails like the file would
    data = json.loads(entry.read_text())
    data["data"]["scripts"][0]["turns"][0] = {"sya": "typo"}
    entry.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"scripts\[0\]\.turns\[0\]: unknown key 'sya'"):
        load_scenario(str(path))

    # an edited file is read again: its own mistake is reported, one line naming the file
    path.write_text(SCENARIO.replace('say: "hello"', 'say: "hello'))
    with pytest.raises(UserError, match="invalid YAML") as err:
        load_scenario(str(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_scenario_data_json_cannot_carry_is_not_cached(tmp_path):
    path = tmp_path / "dated.yaml"
    path.write_text(SCENARIO.replace('say: "hello"', "actions:\n          - write: {path: d.txt, content: 2024-01-01}"))
    scen = load_scenario(str(path))
    assert str(scen.scripts[0].turns[0].actions[0]["write"]["content"]) == "2024-01-01"
    assert _cache_files() == []
