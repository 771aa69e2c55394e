"""Everything done with git and the project's gate commands: `worktrees` (a checkout per task on
`ph/<job>/<task>`, the git runner), `gates` (the project's checks, run confined in a worktree),
`integration` (approved branches merged on the integration branch under the combined gate).
"""
