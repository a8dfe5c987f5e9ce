"""The compilers and caches on this machine: the CUDA toolkit, ccache/sccache behind one interface, nvcc's argv.

Imports only :mod:`cuw.base`. Kept import-light: the seat's per-call runtime reads nvcc's argv from here.
"""
