"""lightgbm: let nvcc find the host compiler on PATH instead of an absolute -ccbin.

CMakeLists.txt sets ``CMAKE_CUDA_HOST_COMPILER`` to ``CMAKE_CXX_COMPILER``
unconditionally, so every CUDA compile carries ``-ccbin=<absolute path>``. In a
forge job that path is the host seat inside the job's own folder, different in
every shard and in the link; ccache hashes ``-ccbin=`` verbatim (its base-dir
rewriting does not reach it), so every CUDA TU missed in the link (15 of 15 in
the end-to-end run here). Without the line nvcc runs ``g++`` from PATH: the
same compiler, and the same command line in every job.
"""

from cuw.patching import PatchContext


def patch(ctx: PatchContext) -> None:
    ctx.replace(
        "CMakeLists.txt",
        '    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")\n',
        "    # cuda-wheels-forge: no absolute -ccbin (nvcc takes g++ from PATH; see recipes/lightgbm/patch.py)\n",
    )
