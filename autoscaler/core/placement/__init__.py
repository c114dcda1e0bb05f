"""Where pods go: the scheduler's filters and a packing engine over existing nodes and new ones."""
