"""guard: catch invalid and out-of-memory training configurations before any GPU is spent."""

__version__ = "0.1.0"
