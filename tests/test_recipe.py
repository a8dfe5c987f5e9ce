import pytest

from cuw.base.errors import CuwError, InputError
from cuw.config.recipe import load_recipe


def _write(recipes_dir, text, key="example"):
    (recipes_dir / key / "recipe.yml").write_text(text)


def test_builtin_recipes_load(recipes_dir):
    example = load_recipe("example", recipes_dir)
    assert example.backend == "scikit-build-core" and not example.links_torch
    assert example.sharding.filter == "seat" and example.sharding.count >= 2
    torch = load_recipe("example_torch", recipes_dir)
    assert torch.links_torch and torch.build_subdir == "torch"
    assert torch.source_dir == example.source_dir


def test_unknown_recipe_lists_known_ones(recipes_dir):
    with pytest.raises(
        CuwError, match=r"unknown recipe 'nattn'.*known recipes: .*example, example_source, example_torch.*natten"
    ):
        load_recipe("nattn", recipes_dir)


def test_unknown_key_names_file_and_closest_key(recipes_dir):
    text = (recipes_dir / "example" / "recipe.yml").read_text().replace("sharding:", "shardng:")
    _write(recipes_dir, text)
    with pytest.raises(CuwError) as err:
        load_recipe("example", recipes_dir)
    message = str(err.value)
    assert "recipe.yml" in message and "'shardng'" in message and "did you mean 'sharding'" in message


def test_unknown_nested_key_names_its_path(recipes_dir):
    text = (recipes_dir / "example" / "recipe.yml").read_text().replace("filter: seat", "filtre: seat")
    _write(recipes_dir, text)
    with pytest.raises(CuwError, match=r"sharding: unknown key 'filtre'; did you mean 'filter'"):
        load_recipe("example", recipes_dir)


def test_unquoted_version_is_an_error_not_a_float(recipes_dir):
    text = (
        (recipes_dir / "example" / "recipe.yml").read_text().replace('archs: {"13.0": ["9.0"]}', 'archs: {"13.0": [9.0, 10.0]}')
    )
    _write(recipes_dir, text)
    with pytest.raises(CuwError, match=r"archs.13.0\[0\]: 9.0 must be a string; YAML read it as a number"):
        load_recipe("example", recipes_dir)
    text = (
        (recipes_dir / "example" / "recipe.yml").read_text().replace('archs: {"13.0": [9.0, 10.0]}', "grid: {min_pytorch: 2.10}")
    )
    _write(recipes_dir, text)
    with pytest.raises(CuwError, match=r"grid.min_pytorch: 2.1 must be a string.*quote it: '2.1'"):
        load_recipe("example", recipes_dir)


def test_an_override_needs_a_readme_line(recipes_dir):
    (recipes_dir / "example" / "README.md").write_text("# example\n")
    with pytest.raises(CuwError, match=r"overrides archs of the farm policy; explain each in .*README.md"):
        load_recipe("example", recipes_dir)
    (recipes_dir / "example" / "README.md").unlink()
    with pytest.raises(CuwError, match=r"overrides archs"):
        load_recipe("example", recipes_dir)


def test_bad_arch_strings(recipes_dir):
    text = (recipes_dir / "example" / "recipe.yml").read_text().replace('["9.0"]', '["sm_90"]')
    _write(recipes_dir, text)
    with pytest.raises(CuwError, match=r"'sm_90' is not a compute capability like '9.0' or '12.0\+PTX'"):
        load_recipe("example", recipes_dir)


def test_bad_filter_value_and_missing_required_key(recipes_dir):
    base = (recipes_dir / "example" / "recipe.yml").read_text()
    _write(recipes_dir, base.replace("filter: seat", "filter: both"))
    with pytest.raises(CuwError, match=r"'both' is not one of 'seat', 'source'"):
        load_recipe("example", recipes_dir)
    _write(recipes_dir, base.replace("links_torch: false\n", ""))
    with pytest.raises(CuwError, match=r"missing required key 'links_torch'"):
        load_recipe("example", recipes_dir)


def test_source_filter_needs_its_globs(recipes_dir):
    base = (recipes_dir / "example" / "recipe.yml").read_text()
    _write(recipes_dir, base.replace("filter: seat", "filter: source"))
    with pytest.raises(CuwError, match=r"sharding.source.globs names no files"):
        load_recipe("example", recipes_dir)


def test_invalid_yaml_names_the_file(recipes_dir):
    _write(recipes_dir, "name: [unclosed\n")
    with pytest.raises(CuwError, match=r"recipe.yml: not valid YAML"):
        load_recipe("example", recipes_dir)


def test_wheel_python_abi3_needs_its_minimum_and_only_it_takes_one(recipes_dir):
    base = (recipes_dir / "example" / "recipe.yml").read_text()
    assert "wheel_python: py3" in base
    _write(recipes_dir, base.replace("wheel_python: py3", "wheel_python: abi3"))
    with pytest.raises(CuwError, match=r"recipe.yml: wheel_python: abi3 needs abi3_min_python"):
        load_recipe("example", recipes_dir)
    _write(recipes_dir, base.replace("wheel_python: py3", 'wheel_python: py3\nabi3_min_python: "3.10"'))
    with pytest.raises(CuwError, match=r"abi3_min_python goes with wheel_python: abi3 \(this recipe has py3\)"):
        load_recipe("example", recipes_dir)
    _write(recipes_dir, base.replace("wheel_python: py3", 'wheel_python: abi3\nabi3_min_python: "3"'))
    with pytest.raises(CuwError, match=r"abi3_min_python '3' is not a Python line like '3.10'"):
        load_recipe("example", recipes_dir)
    _write(recipes_dir, base.replace("wheel_python: py3", "wheel_python: cp3"))
    with pytest.raises(CuwError, match=r"wheel_python: 'cp3' is not one of 'per-interpreter', 'py3', 'abi3'"):
        load_recipe("example", recipes_dir)
    _write(recipes_dir, base.replace("wheel_python: py3", 'wheel_python: abi3\nabi3_min_python: "3.11"'))
    assert load_recipe("example", recipes_dir).abi3_min_python == "3.11"


def test_a_yaml_file_read_again_is_parsed_from_its_bytes_and_each_caller_owns_its_copy(tmp_path):
    """read_yaml keeps what a file's bytes parsed to (a job reads the policy about eight times):
    a change to the file is read, a caller's change to its result reaches no other caller, and a
    file refused once is refused again."""
    from cuw.base.yamlfile import read_yaml

    path = tmp_path / "policy.yml"
    path.write_text("a: {b: [1]}\n")
    first = read_yaml(path, "farm policy")
    first["a"]["b"].append(2)
    assert read_yaml(path, "farm policy") == {"a": {"b": [1]}}
    path.write_text("a: {b: [3]}\n")
    assert read_yaml(path, "farm policy") == {"a": {"b": [3]}}
    path.write_text("a: 1\na: 2\n")
    for _ in range(2):
        with pytest.raises(InputError, match="appears twice"):
            read_yaml(path, "farm policy")
