"""What ``writer.write`` takes, declared apart from the writer so that declaring the format
imports no writer (and the writer no declaration)."""

from __future__ import annotations

__all__ = ["WRITE_OPTIONS"]

WRITE_OPTIONS = frozenset({"batch_size", "time_steps"})
