"""oslens control layer."""
