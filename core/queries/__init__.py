"""Read-only views over the runtime state for the cockpit and the CLI: `work` (jobs, tasks, runs,
which rows a batch of events invalidates) and `problems` (open problems, replies, quota windows,
the supervisor's row). Never writes.
"""
