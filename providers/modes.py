"""The dispatch modes: what a run's worker may do (docs/contracts.md, "Dispatch").

The one list every reader derives from (CLI choices, dispatch's check, the registry's field
type, host skills). It imports nothing, not even typing: the CLI's argument parser reads it on
every command, `--help` included.
"""

MODES = ("code", "explore", "test", "review", "resume", "plan")
