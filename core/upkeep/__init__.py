"""What the operator does to a repository's jobs and runtime state apart from the supervisor's loop:
`ending` (job cancel and job delete: the supervisor is stopped while they work, then started again)
and `repair` (rebuild a damaged state.db from the committed records and the event log).
"""
