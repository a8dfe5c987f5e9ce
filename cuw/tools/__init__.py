"""Tools for recipe authors: the planner and its views, the CMake reader and the guard lint.

Imports :mod:`cuw.ci` and below.
"""
