"""Commands that report on what jobs did, read-only: where the tokens went (`usage`)."""
