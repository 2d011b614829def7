"""oslens analysis layer."""
