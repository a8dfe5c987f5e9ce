"""Reading an nvcc command line: is it a compile, of which source, into which files.

The seat needs three facts from every argv shape nvcc accepts: the source
(the last positional argument with a C/C++/CUDA suffix), the object it writes
(``-o X``, ``-o=X``, ``-oX``, ``--output-file X``/``=X``, or nvcc's default
``<stem>.o``) and the depfile it was asked for (``-MF X``,
``--dependency-output X``, or ``<output stem>.d`` after ``-MD``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

SOURCE_SUFFIXES = (".cu", ".c", ".cc", ".cpp", ".cxx", ".c++", ".C")

# Options whose value is the next argument (when not written with '=').
VALUE_OPTIONS = frozenset(
    """
    -o --output-file -MF --dependency-output -MT --dependency-target-name -x --x
    -Xcompiler --compiler-options -Xptxas --ptxas-options -Xnvlink --nvlink-options
    -Xlinker --linker-options -Xarchive --archive-options -Xfatbin --fatbin-options
    -Xcudafe -ccbin --compiler-bindir -I --include-path -isystem --system-include
    -include --pre-include -L --library-path -l --library -D --define-macro
    -U --undefine-macro -gencode --generate-code -arch --gpu-architecture
    -code --gpu-code -t --threads -std --std -odir --output-directory -ldir
    --library-directory -optf --options-file -maxrregcount --maxrregcount
    -rdc --relocatable-device-code -keep-dir --keep-dir -m --machine
    -split-compile --split-compile -time --time -default-stream --default-stream
    -diag-suppress --diag-suppress -diag-warn --diag-warn -diag-error --diag-error
    -ftz --ftz -prec-div --prec-div -prec-sqrt --prec-sqrt -fmad --fmad
    -cudart --cudart -cudadevrt --cudadevrt -Werror --Werror -dopt --dopt
    -MQ -isystem-after
    """.split()
)

# gcc/g++/clang spell fewer options with a separate value (and -Werror, -time
# and -m take none), so a host compiler's argv is read with this set instead.
HOST_VALUE_OPTIONS = frozenset(
    """
    -o -MF -MT -MQ -x -I -isystem -iquote -idirafter -include -imacros -L -l -D -U
    -Xlinker -Xassembler -Xpreprocessor -aux-info -dumpbase -dumpdir -B
    """.split()
)

COMPILE_FLAGS = frozenset({"-c", "--compile", "-dc", "--device-c", "-dw", "--device-w"})
# Any of these makes the call something other than "compile one TU to an object".
NOT_A_COMPILE = frozenset(
    """
    -E --preprocess -M --generate-dependencies -MM --generate-nonsystem-dependencies
    -ptx --ptx -cubin --cubin -fatbin --fatbin -optix-ir --optix-ir -ltoir --ltoir
    -dlink --device-link -lib --lib -link --link -run --run -V --version -h --help
    -dryrun --dryrun --list-gpu-arch --list-gpu-code -arch-ls -code-ls
    """.split()
)
DEPFILE_WITH_COMPILE = frozenset(
    {"-MD", "--generate-dependencies-with-compile", "-MMD", "--generate-nonsystem-dependencies-with-compile"}
)
# nvcc's shorthands that ccache does not hash: -dc after -c of the same file
# would return the non-relocatable object. Spelled out, ccache hashes them.
EXPANSIONS = {
    "-dc": ["-rdc=true", "-c"],
    "--device-c": ["-rdc=true", "-c"],
    "-dw": ["-rdc=false", "-c"],
    "--device-w": ["-rdc=false", "-c"],
}


@dataclass(frozen=True)
class NvccCall:
    args: list[str]
    is_compile: bool
    source: Optional[str]
    output: Optional[str]
    depfile: Optional[str]

    def cache_safe_args(self) -> list[str]:
        """The same command with -dc/-dw spelled out so the cache hashes them."""
        out: list[str] = []
        for arg in self.args:
            out.extend(EXPANSIONS.get(arg, [arg]))
        return out


def _split(arg: str) -> tuple[str, Optional[str]]:
    if arg.startswith("-") and "=" in arg:
        name, _, value = arg.partition("=")
        return name, value
    return arg, None


def parse(args: list[str], value_options: frozenset[str] = VALUE_OPTIONS) -> NvccCall:
    """Reads an nvcc argv (or, with ``HOST_VALUE_OPTIONS``, a gcc/g++ one)."""
    positionals: list[str] = []
    flags: set[str] = set()
    output: Optional[str] = None
    depfile: Optional[str] = None
    i = 0
    while i < len(args):
        arg = args[i]
        name, value = _split(arg)
        if name in value_options and value is None:
            value = args[i + 1] if i + 1 < len(args) else None
            i += 1
        elif name.startswith("-o") and name not in value_options and name not in ("-objtemp",):
            # nvcc rejects -oFILE, but builds that write it mean the output file.
            name, value = "-o", name[2:]
        i += 1
        if name in ("-o", "--output-file"):
            output = value
        elif name in ("-MF", "--dependency-output"):
            depfile = value
        elif name.startswith("-") and name != "-":
            flags.add(name)
        else:
            positionals.append(arg)

    sources = [p for p in positionals if p.endswith(SOURCE_SUFFIXES)]
    source = sources[-1] if sources else None
    is_compile = bool(flags & COMPILE_FLAGS) and not (flags & NOT_A_COMPILE) and source is not None
    if is_compile and output is None and source is not None:
        output = os.path.splitext(os.path.basename(source))[0] + ".o"
    if is_compile and depfile is None and flags & DEPFILE_WITH_COMPILE and output is not None:
        depfile = os.path.splitext(output)[0] + ".d"
    return NvccCall(list(args), is_compile, source, output, depfile)
