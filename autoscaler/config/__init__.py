"""tidal's configuration: the typed options, their defaults and how layers combine."""
