"""oslens capture layer."""
