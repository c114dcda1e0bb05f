"""The ``tidal`` command: run, plan, simulate, and the files they read."""
