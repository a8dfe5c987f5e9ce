"""cumm: headers (and libraries) from outside the CUDA toolkit, for tensorview.

``include/tensorview/tensor.h`` includes ``<curand.h>``, which a toolkit without
the math libraries (the farm's, and these machines') lacks; the ``nvidia-curand``
wheel (``extra_deps_cuda``) carries it. ``cumm/common.py`` builds every include
list from ``_get_cuda_include_lib()``; the patch rebinds that function to add the
folders in ``CUMM_EXTRA_INCLUDES`` (``os.pathsep``-separated, set in recipe.yml).
They reach each compile as ``-I`` on the command line, where the cache's base dir
makes them the same in every job (an environment search path such as ``CPATH``
would not be). The anchor is the class after the function: if upstream moves
it, the patch fails and gets a look.

``setup.py`` builds ``core_cc`` with pccm's precompiled headers, which ccache
cannot cache ("could not use precompiled header": 34 of the 39 host compiles
uncacheable, a miss in the link gate); the patch passes ``disable_pch=True``,
as spconv's own setup.py does.
"""

from cuw.jobs.patching import PatchContext

ANCHOR = "class GemmKernelFlags(pccm.Class):"

EXTRA = '''\
# cuda-wheels-forge: extra include folders ($CUMM_EXTRA_INCLUDES), e.g. curand.h from the nvidia-curand wheel.
_cuw_cuda_include_lib = _get_cuda_include_lib


def _get_cuda_include_lib():
    includes, lib64 = _cuw_cuda_include_lib()
    extra = [Path(p) for p in os.getenv("CUMM_EXTRA_INCLUDES", "").split(os.pathsep) if p and Path(p).is_dir()]
    return [*includes, *[p for p in extra if p not in includes]], lib64


'''


PCH_ANCHOR = "                      extcallback=CopyHeaderCallback(),\n"


def patch(ctx: PatchContext) -> None:
    ctx.replace("cumm/common.py", ANCHOR, EXTRA + ANCHOR)
    ctx.replace("setup.py", PCH_ANCHOR, PCH_ANCHOR + "                      disable_pch=True,  # cuda-wheels-forge: ccache cannot cache PCH builds\n")
