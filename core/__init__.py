"""The engine: jobs, the supervisor, dispatch, stops, git work and the CLI (docs/architecture.md).

Packages, highest first (an import only goes down this list; tests/test_layers.py checks it with
import-linter): mcp → commands → demo → repo_setup → upkeep → supervisor, queries → stops →
dispatch → git → records → state. `cli.py` is the entry point. Nothing here imports Textual.
"""
