"""Training and verification of the embedded hybrid model (not part of the installed package)."""
