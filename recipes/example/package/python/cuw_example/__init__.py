"""The forge's example package: one shared library holding every kernel TU.

The library exports plain C functions, so it is loaded with ctypes and can be
called on a machine without a GPU: each TU's host function answers.
"""

from ._loader import load

_lib = load(__name__, __path__[0])
tu_values = _lib.tu_values
build_info = _lib.build_info
launch_all = _lib.launch_all
