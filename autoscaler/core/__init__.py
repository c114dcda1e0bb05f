"""The decision core: pure functions from a snapshot, offerings and configuration to plans."""
