"""The test kit: what many test modules need, written once (issue 30)."""
