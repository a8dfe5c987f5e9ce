"""The farm on GitHub: the matrix JSON, the cibuildwheel driver, running the workflow here with act.

Imports :mod:`cuw.jobs` and below.
"""
