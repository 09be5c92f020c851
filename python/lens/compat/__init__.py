"""Compatibility with code written for other libraries' names (opt-in): see lens.compat.nemo_lens."""
