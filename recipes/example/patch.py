"""The example's patch: stamps the cell into the library's build info.

It shows the patch contract (see cuw/jobs/patching.py): idempotent, anchored, and
the same for every job of a cell (shards and link must compile identical
sources, or the link misses the cache).
"""

from cuw.jobs.patching import PatchContext


def patch(ctx: PatchContext) -> None:
    ctx.replace(
        "csrc/registry.cpp",
        'std::string("cuw-example ") + CUW_EXAMPLE_FLAVOUR;',
        f'std::string("cuw-example ") + CUW_EXAMPLE_FLAVOUR + " for {ctx.cell.id}";',
    )
