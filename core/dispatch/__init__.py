"""One bounded run of one worker, and the records of runs the supervisor launches.

Public surface: `prepare.prepare` / `prepare.DispatchOptions` (every check that can fail on the
user's input), `run.execute` (sandbox → sim → confine → spawn → verdict; prints the two contract
lines), `verdict` (what a run earned), `fanout` (several at once), `runs` (launch records,
spawning and adopting dispatch processes, reading verdicts) and `priority` (workers' CPU nice).
`process` runs and watches the worker's process itself.
"""
