import pytest

from topomodel.errors import InputError
from topomodel.inputs.yamlsource import format_path, load_yaml


def test_lines_are_recorded_for_nested_keys_and_items():
    src = load_yaml("f.yaml", text="a:\n  b:\n    - x: 1\n    - x: 2\n")
    assert src.lines[("a", "b", 1, "x")] == 4
    assert src.line(("a", "b", 1, "x", "deeper")) == 4


def test_every_duplicate_key_is_reported():
    with pytest.raises(InputError) as info:
        load_yaml("f.yaml", text="a: 1\nb: 2\na: 3\nb: 4\n")
    assert [p.line for p in info.value.problems] == [3, 4]
    assert "duplicate key (first at line 1)" in str(info.value)


def test_yaml_11_booleans_and_exponents_stay_strings():
    data = load_yaml("f.yaml", text="a: on\nb: yes\nc: 1e9\nd: true\n").data
    assert data == {"a": "on", "b": "yes", "c": "1e9", "d": True}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !!python/object/apply:os.system ['true']", "invalid YAML: could not determine"),
        ("a: [1, 2", "invalid YAML"),
        ("a: b: c", "invalid YAML"),
        ("\t- x", "invalid YAML"),
    ],
)
def test_malformed_or_unsafe_yaml_is_one_located_problem(text, message):
    with pytest.raises(InputError, match=message) as info:
        load_yaml("f.yaml", text=text)
    assert len(info.value.problems) == 1
    assert str(info.value).startswith("f.yaml:")


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read the file"):
        load_yaml(tmp_path / "nope.yaml")


def test_format_path():
    assert format_path(("a", 0, "b")) == "a[0].b"
