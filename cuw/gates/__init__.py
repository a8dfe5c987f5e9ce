"""The verdicts: the shard and link gate conditions, the compile database check, gate reports.

Imports :mod:`cuw.seat` and below.
"""
