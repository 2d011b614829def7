"""Test-only counterparts of oslens.whatif (see oslens_testing)."""
