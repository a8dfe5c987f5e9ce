"""What is asked for: the recipe schema and loading, the farm policy, the grid, a cell, generated docs.

Imports :mod:`cuw.toolchain` and :mod:`cuw.base` only.
"""
