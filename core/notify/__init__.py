"""Problems by email: the per-user settings, the mail sent for each new problem, and the watcher
that obeys the operator's authenticated replies (docs/email.md)."""
