"""Rules of the ds_batch family (being written)."""
