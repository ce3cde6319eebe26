"""Placement of the model on ranks: pipeline stages, process groups and the memory ledger."""
