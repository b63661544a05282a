"""Sources turn files into plain values with a position for every key and value."""
