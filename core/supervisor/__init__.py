"""The supervisor: one process per repository, the only writer of job and task state.

Public surface: `loop.Supervisor` / `loop.run_foreground` (the process), `control` (start, stop and
inspect it from another process), `planning.mark_plan_ready`, `state.ACTIVE` and the task state
machine. Inside, a task moves through `flow` (its steps), `scheduling` (which ready tasks launch),
`launch` (what each worker is told), `review` (reviews and the job's end), `answers` (the
operator's replies applied); `context` is what every step reads, `dispatches` the runs it watches,
`wake` what wakes it, `activity` what a worker is doing now.
"""
