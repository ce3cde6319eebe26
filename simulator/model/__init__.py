"""Transformer cost model: parameter counts, per-op FLOPs and bytes, activation memory."""
