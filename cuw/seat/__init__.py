"""The compiler seat: the per-call runtime placed where nvcc is called (import-light: it runs once per
compile), its installer, the native stub and the seat log reader. Imports :mod:`cuw.partition` and below.
"""
