"""cuw.tools.cmake_guards: consumers of source-dependent CMake targets must sit under if(TARGET ...)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from natten_source import fresh_natten_tree, natten_ctx, natten_recipe

from cuw.tools.cmake_guards import find_unguarded
from cuw.tools.cmake_reader import parse_file
from cuw.base.errors import InputError
from cuw.jobs.patching import apply

NATTEN_CMAKE = Path("csrc") / "CMakeLists.txt"
SEED_CONSUMER = "$<TARGET_OBJECTS:natten_hopper>"


@pytest.fixture(scope="module")
def natten_pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """natten's sdist as upstream ships it (copy it before editing)."""
    return fresh_natten_tree(tmp_path_factory.mktemp("natten") / "pristine")


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _lint(tmp_path: Path, text: str) -> list:
    return find_unguarded(_tree(tmp_path, {"CMakeLists.txt": text}))


def _line_of(text: str, needle: str) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(lines) == 1, f"{needle!r} on lines {lines}"
    return lines[0]


# -- natten's real CMakeLists.txt ---------------------------------------------------


@pytest.fixture
def natten_patched(natten_pristine: Path, tmp_path: Path) -> Path:
    src = tmp_path / "natten"
    shutil.copytree(natten_pristine, src)
    assert apply(natten_recipe(), natten_ctx(src))
    return src


def test_upstream_natten_parses_and_has_no_source_dependent_target(natten_pristine):
    commands = parse_file(natten_pristine / NATTEN_CMAKE)
    names = [c.name for c in commands]
    assert names.count("add_library") == 1 and "file" in names
    globbed = next(c for c in commands if c.name == "file" and c.args[1].text == "AUTOGEN_HOPPER_FNA")
    assert [b.condition[0].text for b in globbed.branches] == ["${NATTEN_WITH_HOPPER_FNA}"]
    assert find_unguarded(natten_pristine) == []


def test_the_seeds_broken_guard_is_reported_at_its_line(natten_patched):
    cmake = natten_patched / NATTEN_CMAKE
    text = cmake.read_text().replace("if(TARGET natten_hopper)", "if(NATTEN_WITH_HOPPER_FNA)")
    cmake.write_text(text)
    findings = find_unguarded(natten_patched)
    assert len(findings) == 1
    (finding,) = findings
    assert finding.file == NATTEN_CMAKE
    assert finding.line == _line_of(text, SEED_CONSUMER)
    assert finding.target == "natten_hopper"
    assert SEED_CONSUMER in finding.consumer
    assert finding.guard.startswith("if(NATTEN_WITH_HOPPER_FNA) at line ")
    assert f"{NATTEN_CMAKE}:{_line_of(text, 'add_library(natten_hopper')}" in finding.producer
    assert "AUTOGEN_HOPPER_FNA OR AUTOGEN_HOPPER_FMHA" in finding.producer
    assert "if(TARGET natten_hopper) instead of if(NATTEN_WITH_HOPPER_FNA)" in finding.fix
    assert str(finding).startswith(f"{NATTEN_CMAKE}:{finding.line}: ")


def test_the_recipes_patch_leaves_natten_clean(natten_patched):
    text = (natten_patched / NATTEN_CMAKE).read_text()
    assert "if(TARGET natten_hopper)" in text and "if(TARGET natten_blackwell)" in text
    assert find_unguarded(natten_patched) == []
    # the lint does see both per-family targets as source-dependent: unguard one and it speaks
    (natten_patched / NATTEN_CMAKE).write_text(text.replace("if(TARGET natten_blackwell)", "if(TRUE)"))
    assert [f.target for f in find_unguarded(natten_patched)] == ["natten_blackwell"]


# -- synthetic trees ----------------------------------------------------------------


def test_nested_conditions(tmp_path):
    findings = _lint(
        tmp_path,
        """
file(GLOB KERNELS kernels/*.cu)
add_library(core SHARED core.cpp)
if(WITH_FAMILY)
  if(KERNELS)
    add_library(fam OBJECT ${KERNELS})
  endif()
  target_link_libraries(core PRIVATE $<TARGET_OBJECTS:fam>)
  if(TARGET fam)
    if(VERBOSE)
      add_dependencies(core fam)
    endif()
  endif()
endif()
""",
    )
    assert [(f.line, f.target) for f in findings] == [(8, "fam")]
    assert findings[0].guard == "if(WITH_FAMILY) at line 4"
    assert "created at CMakeLists.txt:6 under if(KERNELS) at line 5" in findings[0].producer


def test_comments_are_not_code(tmp_path):
    findings = _lint(
        tmp_path,
        """
file(GLOB_RECURSE SRCS "gen/*.cu")
if(SRCS) # if(TARGET fam) in a comment guards nothing
  add_library(fam OBJECT ${SRCS})
endif()
#[[ a bracket comment with code in it:
if(TARGET fam)
]]
#[==[ endif() ]] still inside ]==]
target_link_libraries(app PRIVATE fam) # uses fam
message("if(TARGET fam) in a string")
""",
    )
    assert [(f.line, f.target, f.guard) for f in findings] == [(10, "fam", "no condition")]
    assert findings[0].fix == "wrap it in if(TARGET fam) ... endif()"


def test_elseif_and_else_arms(tmp_path):
    findings = _lint(
        tmp_path,
        """
aux_source_directory(gen GEN)
list(LENGTH GEN gen_count)
if(gen_count EQUAL 0)
  message(STATUS "no generated kernels")
else()
  add_library(gen_objs OBJECT ${GEN})
endif()
if(NOT TARGET gen_objs)
  message(STATUS "skip")
else()
  target_sources(app PRIVATE $<TARGET_OBJECTS:gen_objs>)
endif()
if(FOO)
elseif(TARGET gen_objs AND BAR)
  add_dependencies(app gen_objs)
elseif(BAZ)
  set_target_properties(gen_objs PROPERTIES FOLDER x)
else()
  target_link_libraries(app PRIVATE $<TARGET_FILE:gen_objs>)
endif()
if(TARGET gen_objs OR FORCE)
  add_dependencies(app gen_objs)
endif()
""",
    )
    assert [(f.line, f.target) for f in findings] == [(18, "gen_objs"), (20, "gen_objs"), (23, "gen_objs")]
    assert findings[0].guard == "elseif(BAZ) at line 17"
    assert findings[1].guard == "else() of if(FOO) at line 19"
    assert "under else() of if(gen_count EQUAL 0)" in findings[0].producer


def test_multi_line_calls_report_the_line_of_the_use(tmp_path):
    findings = _lint(
        tmp_path,
        """
set(FAMILY_SOURCES
  a.cu
  b.cu)
file(GLOB FOUND ${FAMILY_SOURCES})
set(ALL ${FOUND} main.cpp)
if(
  ALL
)
  add_library(fam
    OBJECT
    ${ALL})
endif()
target_link_libraries(
  app
  PRIVATE
    other
    "$<TARGET_OBJECTS:fam>"
  )
target_sources(app PRIVATE $<$<TARGET_EXISTS:fam>:$<TARGET_OBJECTS:fam>>)
""",
    )
    assert [(f.line, f.target) for f in findings] == [(18, "fam")]
    assert findings[0].consumer == 'target_link_libraries(app PRIVATE other "$<TARGET_OBJECTS:fam>")'


def test_targets_that_do_not_depend_on_sources_are_not_reported(tmp_path):
    findings = _lint(
        tmp_path,
        """
file(GLOB SRCS *.cu)
add_library(lib SHARED ${SRCS})
if(WITH_CUDA)
  add_library(cuda_part OBJECT k.cu)
endif()
target_link_libraries(app PRIVATE lib $<TARGET_OBJECTS:cuda_part>)
if(SRCS)
  add_library(fam OBJECT ${SRCS})
  set_target_properties(fam PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(X)
    target_link_libraries(app PRIVATE fam)
  endif()
endif()
""",
    )
    # unconditional and arch-flag targets exist in every shard; uses inside the producer's own arm run only with it
    assert findings == []


def test_targets_across_files_and_transitive_conditions(tmp_path):
    tree = _tree(
        tmp_path,
        {
            "CMakeLists.txt": "add_subdirectory(kernels)\nadd_executable(app main.cpp)\n"
            "target_link_libraries(app PRIVATE wrap)\n",
            "kernels/CMakeLists.txt": "file(GLOB K *.cu)\nif(K)\n  add_library(fam OBJECT ${K})\nendif()\n"
            "if(TARGET fam)\n  add_library(wrap STATIC $<TARGET_OBJECTS:fam>)\nendif()\n",
            "build/CMakeCache.txt": "",
            "build/CMakeFiles/x.cmake": "target_link_libraries(app PRIVATE fam)\n",
        },
    )
    findings = find_unguarded(tree)
    assert [(str(f.file), f.line, f.target) for f in findings] == [("CMakeLists.txt", 3, "wrap")]
    assert "kernels/CMakeLists.txt:6 under if(TARGET fam)" in findings[0].producer


@pytest.mark.parametrize(
    "text, why",
    [
        ("if(A)\n  message(x)\n", r"CMakeLists.txt:1: cannot parse CMake: if\(\) is never closed"),
        ("message(x)\nendif()\n", r"CMakeLists.txt:2: cannot parse CMake: endif\(\) without an open if\(\)"),
        ('message("open\n', r"CMakeLists.txt:1: cannot parse CMake: a quoted argument is never closed"),
        ("set(X\n  a\n", r"CMakeLists.txt:1: cannot parse CMake: a command's '\(' is never closed"),
        ("if(A)\nelse()\nelseif(B)\nendif()\n", r"CMakeLists.txt:3: .*elseif\(\) after else\(\)"),
        ("#[[ never closed\n", r"CMakeLists.txt:1: .*\[\[ is never closed"),
    ],
)
def test_broken_cmake_is_one_clear_error(tmp_path, text, why):
    with pytest.raises(InputError, match=why):
        _lint(tmp_path, text)


def test_a_tree_without_cmake_files_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no CMakeLists.txt"):
        find_unguarded(tmp_path)
    with pytest.raises(InputError, match="no such folder"):
        find_unguarded(tmp_path / "missing")


# -- the CLI verb -------------------------------------------------------------------


def test_cli_lint_guards_on_a_folder(tmp_path, capsys):
    from cuw.cli.main import main

    bad = _tree(
        tmp_path / "bad",
        {"CMakeLists.txt": "file(GLOB S *.cu)\nif(S)\n  add_library(f OBJECT ${S})\nendif()\nadd_dependencies(app f)\n"},
    )
    assert main(["lint-guards", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("CMakeLists.txt:5: add_dependencies(app f) uses f")
    assert "fix: wrap it in if(TARGET f) ... endif()" in out
    assert "1 unguarded consumer(s)" in err

    good = _tree(tmp_path / "good", {"CMakeLists.txt": "add_library(f OBJECT a.cu)\nadd_dependencies(app f)\n"})
    assert main(["lint-guards", str(good)]) == 0
    assert capsys.readouterr().out == ""

    assert main(["lint-guards", str(tmp_path / "missing/")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_cli_lint_guards_on_the_natten_recipe(capsys):
    """The recipe's source as its jobs see it: fetched through the source cache, patched."""
    from cuw.cli.main import main

    assert main(["lint-guards", "natten"]) == 0
    assert "in the patched source of natten is under if(TARGET ...)" in capsys.readouterr().err
