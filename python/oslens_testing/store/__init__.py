"""Test-only counterparts of oslens.store (see oslens_testing)."""
