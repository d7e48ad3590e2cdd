"""Property tests: whatever a catalog file holds, only clean CatalogErrors come out."""

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topomodel.errors import CatalogError
from topomodel.inputs.catalog import builtin_catalog_files, load_catalog

FILES = {path.name: path.read_text() for path in builtin_catalog_files()}
SETTINGS = settings(deadline=None,  # examples: the profile of conftest.py (25; 150 slow)
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["400 Gb/s", "400 Gb/s /dir", "900 GB/s bidir", "16 GT/s", "3 GHz",
                     "0 W", "-1 GB", "1e9", "on", "qm9700", "nvlink4", "switched"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)


def load_only_clean_errors(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_catalog([path])
    except CatalogError as exc:
        assert exc.problems
        for problem in exc.problems:
            line = str(problem)
            assert "\n" not in line and "Traceback" not in line


@SETTINGS
@given(name=st.sampled_from(sorted(FILES)), data=st.data())
def test_mutated_lines(tmp_path, name, data):
    lines = FILES[name].splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["delete", "duplicate", "replace_value",
                                            "truncate", "garble"]))
        line = lines[index]
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, line)
        elif action == "replace_value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[index] = f"{key}: {yaml.safe_dump(data.draw(values), default_flow_style=True)}"
            lines[index] = lines[index].rstrip().removesuffix("...").rstrip()
        elif action == "truncate":
            lines[index] = line[: data.draw(st.integers(0, len(line)))]
        else:
            lines[index] = line + data.draw(st.text(max_size=5))
        if not lines:
            lines = [""]
    load_only_clean_errors(tmp_path, "\n".join(lines) + "\n")


@SETTINGS
@given(document=st.dictionaries(
    st.sampled_from(["switches", "nics", "systems", "optics", "bogus"]),
    st.dictionaries(st.sampled_from(["qm9700", "x", "Bad Id"]),
                    st.dictionaries(st.sampled_from(
                        ["ports", "port_rate", "protocol", "source", "provenance",
                         "scaleup", "accelerator", "rate", "reach", "medium", "form"]),
                        values, max_size=6), max_size=2), max_size=3))
def test_random_documents(tmp_path, document):
    load_only_clean_errors(tmp_path, yaml.safe_dump(document))


@SETTINGS
@given(text=st.text(max_size=200))
def test_random_text(tmp_path, text):
    load_only_clean_errors(tmp_path, text)


# YAML's own constructs: tags, anchors and aliases, deep nesting, huge integers --------

TAGS = ["!!python/object:os.system", "!!python/name:os.system", "!!binary", "!!set",
        "!!omap", "!!timestamp", "!!float", "!!int", "!!str", "!!null", "!foo", "!<tag:x>"]
KEYS = ["ports", "port_rate", "protocol", "source", "provenance", "capacity", "latency",
        "breakouts", "notes", "<<"]


@st.composite
def yaml_value(draw, depth=0):
    """YAML text of a value, built from the constructs plain data generators miss."""
    kind = draw(st.sampled_from(["scalar", "huge", "tagged", "nested", "flow"]
                                if depth < 3 else ["scalar", "huge", "tagged"]))
    if kind == "scalar":
        return yaml.safe_dump(draw(scalars), default_flow_style=True).strip().removesuffix(
            "...").strip() or "''"
    if kind == "huge":
        digits = draw(st.sampled_from([20, 400, 4400]))  # 4,300: Python's int-to-text limit
        return draw(st.sampled_from(["", "-"])) + "9" * digits + draw(
            st.sampled_from(["", ".5", "e999", " Gb/s"]))
    if kind == "tagged":
        return f"{draw(st.sampled_from(TAGS))} {draw(yaml_value(depth + 1))}"
    if kind == "nested":
        levels = draw(st.sampled_from([1, 3, 60, 1100]))  # 1,000: the YAML loader's limit
        return "[" * levels + draw(yaml_value(depth + 1)) + "]" * levels
    items = draw(st.lists(yaml_value(depth + 1), max_size=3))
    if draw(st.booleans()):
        return "[" + ", ".join(items) + "]"
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=len(items), max_size=len(items)))
    return "{" + ", ".join(f"{k}: {v}" for k, v in zip(keys, items, strict=True)) + "}"


@SETTINGS
@given(values=st.lists(yaml_value(), min_size=1, max_size=4),
       keys=st.lists(st.sampled_from(KEYS), min_size=4, max_size=4),
       alias=st.sampled_from(["none", "value", "entry", "merge", "chain"]))
def test_tags_aliases_deep_nesting_and_huge_integers(tmp_path, values, keys, alias):
    lines = ["anchors: &a " + values[0]] if alias != "none" else []
    if alias == "chain":  # each level repeats the one before: a small "billion laughs"
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
            f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
            for i in range(1, 5)]
    lines.append("switches:")
    lines.append("  qm9700: &entry")
    for key, value in zip(keys, values, strict=False):
        lines.append(f"    {key}: {value}")
    if alias == "value":
        lines.append("    notes: *a")
    elif alias == "merge":
        lines.append("    <<: *a")
    elif alias == "chain":
        lines.append("    breakouts: *a4")
    if alias == "entry":
        lines.append("  other: *entry")
    load_only_clean_errors(tmp_path, "\n".join(lines) + "\n")
