"""Runtime state: `store` (.ai/runtime/state.db, SQLite in WAL mode, one writer per table) and
`events` (.ai/runtime/events.jsonl, append-only, read by tailers). The bottom of core.
"""
