"""The example built as a torch extension: the same kernel TUs, torch's builder."""

import torch  # noqa: F401  -- loads the torch and CUDA runtime libraries _kernels needs

from ._loader import load

_lib = load(__name__, __path__[0])
tu_values = _lib.tu_values
build_info = _lib.build_info
launch_all = _lib.launch_all
