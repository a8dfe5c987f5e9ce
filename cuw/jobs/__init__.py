"""The jobs: a job folder (workspace), sources, patches, build backends, shard archives, the shard job, the
link job and the local whole-cell run, and the cell timeline. Imports :mod:`cuw.wheel` and below.
"""
