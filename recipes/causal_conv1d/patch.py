"""causal-conv1d: compile for the cell's arch list, not upstream's fixed one.

setup.py hard-codes its -gencode list (sm_75, 80, 87, 90, 100, 120, and 103,
110, 121 on CUDA 13) and reads no arch variable; because its nvcc flags name
an arch, torch adds nothing from TORCH_CUDA_ARCH_LIST. The patch replaces the
list by torch's own flags for TORCH_CUDA_ARCH_LIST, which the forge sets from
the cell's arch list (the same for every job of a cell). The anchor is the
whole upstream list: if upstream changes it, the patch fails and the new list
gets a look.
"""

from cuw.jobs.patching import PatchContext

UPSTREAM_ARCHS = """\
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_75,code=sm_75")
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_80,code=sm_80")
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_87,code=sm_87")
        if bare_metal_version >= Version("11.8"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_90,code=sm_90")
        if bare_metal_version >= Version("12.8"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_100,code=sm_100")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_120,code=sm_120")
        if bare_metal_version >= Version("13.0"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_103,code=sm_103")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_110,code=sm_110")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_121,code=sm_121")
"""

CELL_ARCHS = """\
        # cuda-wheels-forge: the cell's arch list (TORCH_CUDA_ARCH_LIST), not a fixed one.
        from torch.utils.cpp_extension import _get_cuda_arch_flags

        cc_flag += _get_cuda_arch_flags()
"""


def patch(ctx: PatchContext) -> None:
    ctx.replace("setup.py", UPSTREAM_ARCHS, CELL_ARCHS)
