"""Rules of the accelerate family (being written)."""
