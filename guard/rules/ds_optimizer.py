"""Rules of the ds_optimizer family (being written)."""
