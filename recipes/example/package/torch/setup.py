"""The example as a torch extension: setuptools + torch's BuildExtension (ninja).

nvcc is reached through PYTORCH_NVCC / CUDA_HOME; the arch list through
TORCH_CUDA_ARCH_LIST. Sources are absolute paths into ../csrc.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(HERE), "csrc")
SOURCES = sorted(glob.glob(os.path.join(CSRC, "kernels", "*.cu"))) + [
    os.path.join(CSRC, "dispatch.cpp"),
    os.path.join(CSRC, "registry.cpp"),
    os.path.join(HERE, "torch_link.cpp"),
]
FLAVOUR = ['-DCUW_EXAMPLE_FLAVOUR="torch"']

setup(
    name="cuw-example-torch",
    version="0.1.0",
    packages=["cuw_example_torch"],
    ext_modules=[
        CUDAExtension(
            "cuw_example_torch._kernels",
            SOURCES,
            extra_compile_args={"cxx": ["-O2", *FLAVOUR], "nvcc": ["-O2"]},
            # A missing kernel must fail the link (see dispatch.cpp).
            extra_link_args=["-Wl,--no-undefined"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
