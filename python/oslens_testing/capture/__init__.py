"""Test-only counterparts of oslens.capture (see oslens_testing)."""
