"""Test-only counterparts of oslens.analysis (see oslens_testing)."""
