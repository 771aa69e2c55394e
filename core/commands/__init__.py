"""CLI command groups; see core/cli.py. Top-level imports here must stay light."""
