"""oslens report layer."""
