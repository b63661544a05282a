"""guard diagnose: the out-of-memory events in training logs, per rank, with their cause."""
