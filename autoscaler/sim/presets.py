"""Presets the simulator applies to KAI scenarios (the same text as config/examples/kai.yaml)."""

KAI_PENDING_REGEXP = (
    r"(?s)^(?!\s*(?:OverLimit|OverQuota|NonPreemptibleOverQuota))(?!.*(?i:quota))"
    r".*(?:\bInsufficient \S|Too many pods"
    r"|didn't match Pod's node affinity/selector|didn't satisfy plugin\(s\) \[NodeAffinity\]"
    r"|untolerated taint|didn't match pod (?:anti-)?affinity rules"
    r"|didn't satisfy existing pods anti-affinity rules"
    r"|didn't match pod topology spread constraints|didn't have free ports|were unschedulable"
    r"|didn't have enough resources|no nodes with enough resources were found"
    r"|no nodes available to schedule pods|No node in the \S+ node-pool has)"
)
