"""pilothouse: dispatch bounded tasks to isolated LLM workers and supervise whole jobs."""

__version__ = "0.1.0"
