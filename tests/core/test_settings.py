"""Changing one setting of .ai/project.yaml (core/records/settings.py): comments kept, checked as
load_project checks it, refused in one line with the file untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core.records import settings
from pilothouse.providers.errors import UserError
from support import project_layout

PROJECT = """# the project's settings
workflow:
  review: ai   # every task
gates:
  fast: "python -m pytest -q"   # quick
  full: python -m pytest
budgets:
  job_tokens: 1000  # raise when needed
"""


def test_a_setting_changes_with_the_files_comments_kept_and_says_when_it_applies(tmp_path: Path) -> None:
    layout = project_layout(tmp_path, PROJECT)
    assert settings.set_value(layout, "budgets.job_tokens", "5000") == "at once"
    assert layout.project_yaml.read_text() == PROJECT.replace("1000", "5000")
    assert settings.set_value(layout, "max_workers", "4").startswith("to what starts next")
    text = layout.project_yaml.read_text()
    assert text.startswith(PROJECT.replace("1000", "5000")) and text.endswith("max_workers: 4\n")
    listed = {path: (value, written) for path, value, written in settings.rows(layout)}
    assert listed["max_workers"] == (4, True) and listed["workflow.review"] == ("ai", True)
    assert listed["worker_nice"][1] is False  # a default the file leaves is listed too


@pytest.mark.parametrize("path,raw,said", [
    ("workflow.review", "sometimes", "workflow.review: Input should be 'ai', 'once', 'off' or 'human'"),
    ("budgets.job_tokens", "lots", "budgets.job_tokens"),
    ("gates.nightly_typo", "[1, 2]", "gates.nightly_typo"),
])
def test_a_value_that_does_not_fit_is_refused_in_one_line_and_the_file_stays(tmp_path: Path, path: str, raw: str,
                                                                               said: str) -> None:
    layout = project_layout(tmp_path, PROJECT)
    with pytest.raises(UserError) as refused:
        settings.set_value(layout, path, raw)
    assert said in str(refused.value) and ".ai/project.yaml" in str(refused.value) and "\n" not in str(refused.value)
    assert layout.project_yaml.read_text() == PROJECT


def test_saving_one_setting_leaves_every_other_line_as_written(tmp_path: Path) -> None:
    """Untouched nulls stay `null` and `~` (the round trip wrote them as nothing), and the changed
    line keeps the operator's gap before its comment (it moved to the old column)."""
    written = PROJECT.replace("job_tokens: 1000  # raise when needed", "job_tokens: null  # none yet") \
        + "base_branch: ~\n"
    layout = project_layout(tmp_path, written)
    settings.set_value(layout, "workflow.review", "off")
    assert layout.project_yaml.read_text() == written.replace("review: ai   #", "review: off   #")
    settings.set_value(layout, "budgets.job_tokens", "600000")
    assert layout.project_yaml.read_text() == written.replace("review: ai   #", "review: off   #").replace(
        "job_tokens: null  # none yet", "job_tokens: 600000  # none yet")
