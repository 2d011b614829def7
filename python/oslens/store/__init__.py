"""oslens store layer."""
