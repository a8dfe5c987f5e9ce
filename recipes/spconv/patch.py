"""spconv: headers from outside the CUDA toolkit for cumm's tensorview.

spconv's generated TUs include cumm's ``tensorview/tensor.h``, which includes
``<curand.h>``; the toolkit here (and the farm's) lacks the math libraries, and
the ``nvidia-curand`` wheel (``extra_deps_cuda``) carries the header. The include
lists come from ``cumm.common._get_cuda_include_lib()`` of the cumm the build
imports (the generator wheel in extra_deps, not a source this patch can edit), so
``setup.py`` rebinds that function, right after its cumm imports and before any
generator class is built, to add the folders in ``CUMM_EXTRA_INCLUDES``
(``os.pathsep``-separated, set in recipe.yml). They reach each compile as ``-I`` on
the command line, where the cache's base dir makes them the same in every job.
The same rebinding as recipes/cumm/patch.py; the anchor is setup.py's import of
``CompileInfo``: if upstream moves it, the patch fails and gets a look.
"""

from cuw.jobs.patching import PatchContext

ANCHOR = "    from cumm.common import CompileInfo\n"

EXTRA = '''\
    # cuda-wheels-forge: extra include folders ($CUMM_EXTRA_INCLUDES), e.g. curand.h from the nvidia-curand wheel.
    import cumm.common as _cuw_common
    _cuw_cuda_include_lib = _cuw_common._get_cuda_include_lib

    def _cuw_get_cuda_include_lib():
        includes, lib64 = _cuw_cuda_include_lib()
        extra = [Path(p) for p in os.getenv("CUMM_EXTRA_INCLUDES", "").split(os.pathsep) if p and Path(p).is_dir()]
        return [*includes, *[p for p in extra if p not in includes]], lib64

    _cuw_common._get_cuda_include_lib = _cuw_get_cuda_include_lib
'''


def patch(ctx: PatchContext) -> None:
    ctx.replace("setup.py", ANCHOR, ANCHOR + EXTRA)
