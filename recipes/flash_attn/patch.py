"""flash-attn: C++20, which torch's headers need.

flash-attn 2.8.3's ``setup.py`` passes ``-std=c++17`` to nvcc and the host compiler
(four places, ``/std:c++17`` once for MSVC). torch 2.14's headers use C++20
(``std::strong_ordering`` in ``c10/util/intrusive_ptr.h``), so every TU fails
with 'namespace "std" has no member "strong_ordering"'. The patch asks for C++20
in each place; if upstream changes the count, the patch fails and gets a look.
"""

from cuw.jobs.patching import PatchContext


def patch(ctx: PatchContext) -> None:
    ctx.replace("setup.py", '"-std=c++17"', '"-std=c++20"', count=4)
    ctx.replace("setup.py", '"/std:c++17"', '"/std:c++20"')
