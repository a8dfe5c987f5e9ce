"""Which shard owns which TU: keys and shard specs, the rules (hash, sorted, LPT), coverage, cost tables.

The one definition of the partition; the seat, the source filter, the gates and the planner all call it.
Imports :mod:`cuw.config` and below.
"""
