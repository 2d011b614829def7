"""Test-only counterparts of oslens.control (see oslens_testing)."""
