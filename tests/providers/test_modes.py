"""Every table keyed by dispatch mode covers exactly the modes of providers/modes.py."""

from __future__ import annotations

from pilothouse.core.dispatch.prepare import DEFAULT_STEP_CAP
from pilothouse.providers import contract
from pilothouse.providers.confine import WRITER_MODES
from pilothouse.providers.contract_fast import RESULT_MODELS
from pilothouse.providers.modes import MODES
from pilothouse.providers.runners.builtin_tools import MODE_TOOLS


def test_mode_tables_cover_every_mode_and_nothing_else() -> None:
    for name, table in (("DEFAULT_STEP_CAP", DEFAULT_STEP_CAP), ("RESULT_MODELS", RESULT_MODELS),
                        ("contract.RESULT_MODELS", contract.RESULT_MODELS),
                        ("MODE_TOOLS", MODE_TOOLS)):
        assert set(table) == set(MODES), name
    assert WRITER_MODES <= set(MODES)
