"""Kernel launchers: each appends one op's launches to a Program; the model calls only these."""
