"""oslens labs layer."""
