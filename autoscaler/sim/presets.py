"""Presets the simulator applies to KAI scenarios (the same text as config/examples/kai.yaml)."""

KAI_PENDING_REGEXP = "(?s)^(?!\\s*(?:OverLimit|OverQuota|NonPreemptibleOverQuota))(?!.*(?i:quota)).*(?:\\bInsufficient \\S|Too many pods|didn't have enough resources|no nodes with enough resources were found|no nodes available to schedule pods|didn't match Pod's node affinity/selector|untolerated taint|No node in the \\S+ node-pool has)"
