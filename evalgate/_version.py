"""evalgate's version, importable without loading any stage (the engine worker reports it)."""

__version__ = "0.1.0"
