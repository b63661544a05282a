"""Rules of the ds_zero family (being written)."""
