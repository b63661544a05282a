"""Rules of the ds_precision family (being written)."""
