"""The example built as a torch extension: the same kernel TUs, torch's builder."""

import ctypes

import torch  # noqa: F401  -- loads the torch and CUDA runtime libraries _kernels needs

from ._loader import load

_lib = load(__name__, __path__[0])
tu_values = _lib.tu_values
build_info = _lib.build_info
launch_all = _lib.launch_all


def torch_device() -> str:
    """A c10 call made from the extension: proof that it links torch."""
    fn = _lib.dll.cuw_example_torch_device
    fn.restype = ctypes.c_char_p
    return fn().decode()
