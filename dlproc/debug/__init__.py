"""Debugging aids: first-divergence comparison of the RTL against the golden model."""
