"""The wheel after the link: finish (tags, metadata, repair), the verify gate, the index and publishing.

Imports :mod:`cuw.gates` and below.
"""
