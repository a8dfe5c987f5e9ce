"""The command line: argument parsing, the verbs, the error boundary, and the cibuildwheel build backend.

The top layer: nothing imports it.
"""
