from cuw.toolchain.nvcc_args import parse

TORCH_NINJA = (
    "-MD -MF /b/temp/k00.o.d -I/t/include -I/usr/local/cuda/include -c -c /s/csrc/kernels/k00.cu "
    "-o /b/temp/k00.o -D__CUDA_NO_HALF_OPERATORS__ --expt-relaxed-constexpr --compiler-options '-fPIC' "
    "-O2 -DTORCH_EXTENSION_NAME=_kernels -gencode=arch=compute_90,code=sm_90 -std=c++17"
).split()
CMAKE = [
    "-forward-unknown-to-host-compiler",
    "-Xcompiler",
    "-Wall -Wextra",
    '-DNAME="a b"',
    "--generate-code=arch=compute_90,code=[compute_90,sm_90]",
    "-MD",
    "-MT",
    "CMakeFiles/k.dir/csrc/k.cu.o",
    "-MF",
    "CMakeFiles/k.dir/csrc/k.cu.o.d",
    "-x",
    "cu",
    "-c",
    "/src/csrc/k.cu",
    "-o",
    "CMakeFiles/k.dir/csrc/k.cu.o",
]


def test_torch_ninja_call_with_doubled_c():
    call = parse(TORCH_NINJA)
    assert call.is_compile
    assert call.source == "/s/csrc/kernels/k00.cu"
    assert call.output == "/b/temp/k00.o"
    assert call.depfile == "/b/temp/k00.o.d"


def test_cmake_call_with_spaces_in_one_argument():
    call = parse(CMAKE)
    assert (call.source, call.output, call.depfile) == (
        "/src/csrc/k.cu",
        "CMakeFiles/k.dir/csrc/k.cu.o",
        "CMakeFiles/k.dir/csrc/k.cu.o.d",
    )


def test_output_spellings():
    for args, out in [
        (["-c", "a.cu", "-o", "x.o"], "x.o"),
        (["-c", "a.cu", "-ox.o"], "x.o"),
        (["-c", "a.cu", "-o=x.o"], "x.o"),
        (["-c", "a.cu", "--output-file", "x.o"], "x.o"),
        (["-c", "a.cu", "--output-file=x.o"], "x.o"),
        (["-c", "dir/a.cu"], "a.o"),  # nvcc's default: <stem>.o in the cwd
    ]:
        assert parse(args).output == out, args


def test_depfile_spellings():
    assert parse(["-c", "a.cu", "-o", "x.o", "--dependency-output", "x.d", "-MD"]).depfile == "x.d"
    assert parse(["-c", "a.cu", "-o", "x.o", "-MF=y.d", "-MD"]).depfile == "y.d"
    assert parse(["-c", "a.cu", "-o", "out/x.o", "-MD"]).depfile == "out/x.d"
    assert parse(["-c", "a.cu", "-o", "x.o"]).depfile is None


def test_dc_and_dw_are_spelled_out_for_the_cache():
    assert parse(["-dc", "a.cu", "-o", "a.o"]).cache_safe_args() == ["-rdc=true", "-c", "a.cu", "-o", "a.o"]
    assert parse(["--device-c", "a.cu"]).cache_safe_args()[:2] == ["-rdc=true", "-c"]
    assert parse(["-dw", "a.cu"]).cache_safe_args()[:2] == ["-rdc=false", "-c"]
    assert parse(["-dc", "a.cu"]).is_compile


def test_calls_that_are_not_compiles():
    for args in (
        ["--version"],
        ["-v", "__cmake_determine_cuda"],
        ["", "-v", "__cmake_determine_cuda"],  # CMake 4 passes an empty first argument
        ["--keep", "--keep-dir", "tmp", "-v", "CMakeCUDACompilerId.cu"],  # CompilerId: no -c, no -o
        ["-dlink", "a.o", "b.o", "-o", "dlink.o"],
        ["-shared", "a.o", "-o", "lib.so"],
        ["-E", "a.cu"],
        ["-c", "-dlink", "a.o", "-o", "x.o"],
        ["-ptx", "a.cu"],
    ):
        assert not parse(args).is_compile, args


def test_option_values_are_not_taken_for_the_source():
    call = parse(["-c", "-Xcompiler", "x.cpp", "real.cu", "-include", "pre.cu", "-o", "r.o"])
    assert call.source == "real.cu"
    call = parse(["-x", "cu", "-c", "ggml.c", "-o", "ggml.o"])
    assert call.source == "ggml.c"
