"""Rules of the ds_misc family (being written)."""
