"""Helpers for checking fixedgraph against independent references (needs torch + transformers)."""
