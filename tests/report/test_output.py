"""Machine-readable output of every verb: tidy CSV (pandas reads it), one file per table,
Parquet, Markdown, and the JSON Schemas of the input formats (#15 item 7)."""

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from topomodel.cli import main

DESIGN = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n"
JOB = ["--model", "toy-dense", "--tp", "4"]
ROOT = Path(__file__).resolve().parents[2]

# A whole cell that is a number written for people: thousands separators, or a unit.
FORMATTED = re.compile(r"^\s*[-+]?(\d{1,3}(,\d{3})+|\d+\.?\d*)\s*(%|[kMGTPµnm]?(B|b|W|s|B/s|b/s"
                       r"|Hz|USD))\s*$|^\s*\d{1,3}(,\d{3})+(\.\d+)?\s*$")


@pytest.fixture
def verbs(toy, tmp_path):
    """Every verb that prints results, as argv lists, on the toy design."""
    toy(DESIGN)
    design, catalog = str(toy.tmp_path / "design.yaml"), ["--catalog", str(toy.catalog_path)]
    return {
        "units": ["units", "900 GB/s bidir"],
        "catalog list": ["catalog", "list", "--kind", "switch"],
        "catalog show": ["catalog", "show", "qm9700"],
        "build": ["build", design, *catalog],
        "route": ["route", design, *catalog, "--collective", "allreduce", "--size", "1 MiB"],
        "step": ["step", design, *JOB, *catalog, "--sensitivity"],
        "goodput": ["goodput", design, *JOB, *catalog],
        "compare": ["compare", design, design, design, *JOB, *catalog],
        "scale": ["scale", design, *JOB, *catalog, "--counts", "8"],
        "options": ["options"],
        "schema": ["schema", "design"],
        "export": ["export", design, *catalog, "--to", "json", "-o", str(tmp_path / "g.json")],
        "draw": ["draw", design, *catalog, "-o", str(tmp_path / "t.png")],
        "sweep": ["sweep", str(ROOT / "examples/sweeps/dgx-h100-layouts.yaml"), "--dry-run"],
        "review": ["review", design, *JOB, *catalog, "-o", str(tmp_path / "review")],
    }


def _formatted_cells(frame):
    return [(c, v) for c in frame.columns for v in frame[c].dropna()
            if isinstance(v, str) and FORMATTED.match(v)]


def test_every_verb_writes_one_tidy_csv_pandas_reads(verbs, capsys):
    for name, argv in verbs.items():
        assert main([*argv, "--format", "csv"]) == 0, name
        text = capsys.readouterr().out
        if name == "review":  # its -o is the report: the tables go to DIR/tables
            assert text.startswith("wrote "), name
            continue
        frame = pd.read_csv(io.StringIO(text))
        assert frame.columns[0] == "table" and len(frame), name
        assert not _formatted_cells(frame), (name, _formatted_cells(frame)[:5])
        assert not any("," in str(c) or "(" in str(c) for c in frame.columns), name


def test_csv_numbers_are_plain_with_units_in_the_column_names(verbs, capsys):
    assert main([*verbs["build"], "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    tiers = frame[frame["table"] == "tiers"].dropna(axis=1, how="all")
    assert {"capacity_Bps", "per_accelerator_Bps", "ports_free"} <= set(tiers.columns)
    assert tiers["capacity_Bps"].dtype.kind == "f" and (tiers["capacity_Bps"] > 0).all()
    build = json.loads(_run(capsys, *verbs["build"], "--format", "json"))
    assert list(tiers["capacity_Bps"]) == [t["capacity_Bps"] for t in build["tiers"]]
    summary = frame[frame["table"] == "summary"]
    assert summary["bisection_Bps"].item() == build["bisection"]["bisection_Bps"]


def _run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_one_file_per_table_as_csv_or_parquet(verbs, capsys, tmp_path):
    out = tmp_path / "tables"
    text = _run(capsys, *verbs["step"], "--format", "csv", "-o", str(out))
    names = {p.name for p in out.iterdir()}
    assert {"step.csv", "walls.csv", "communication.csv", "memory.csv", "goodput.csv",
            "sensitivity.csv"} <= names
    assert text.splitlines() == [f"wrote {out / n}" for n in _order(text)]
    walls = pd.read_csv(out / "walls.csv")
    assert list(walls.columns) == ["wall", "time_s", "share_of_step"]
    _run(capsys, *verbs["step"], "--format", "parquet", "-o", str(out))
    again = pd.read_parquet(out / "walls.parquet")
    assert again["time_s"].tolist() == pytest.approx(walls["time_s"].tolist())
    # the review's tables go under its report directory
    _run(capsys, *verbs["review"], "--format", "parquet")
    tables = tmp_path / "review" / "tables"
    assert (tmp_path / "review" / "report.html").exists()
    assert {"summary.parquet", "build_tiers.parquet", "collectives.parquet",
            "bibliography.parquet", "inputs.parquet"} <= {p.name for p in tables.iterdir()}


def _order(text):
    return [Path(line.removeprefix("wrote ")).name for line in text.splitlines()]


def test_parquet_needs_a_directory(verbs, capsys):
    assert main([*verbs["build"], "--format", "parquet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-o DIR" in err[0]


def test_units_and_options_print_markdown(capsys):
    text = _run(capsys, "units", "900 GB/s bidir", "--format", "md")
    assert "| value | unit" in text.replace("  ", " ") or "|   value |" in text
    assert re.search(r"^\|[-:|]+\|$", text, re.M)  # a Markdown table rule
    text = _run(capsys, "options", "--format", "md")
    assert text.startswith("## Step options") and "| key" in text


@pytest.mark.parametrize("what", ["design", "catalog", "sweep"])
def test_schemas_are_valid_and_accept_the_shipped_files(what, capsys):
    import jsonschema

    schema = json.loads(_run(capsys, "schema", what))
    assert "schema" not in schema or schema["$schema"]  # the bare schema, as editors want
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = {"design": sorted((ROOT / "examples").glob("*.yaml")),
             "catalog": sorted((ROOT / "catalogs").glob("*.yaml")),
             "sweep": sorted((ROOT / "examples/sweeps").glob("*.yaml"))}[what]
    assert files
    for path in files:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path.name, errors[0].message)
    keys = pd.read_csv(io.StringIO(_run(capsys, "schema", what, "--format", "csv")))
    assert {"table", "key", "type", "required", "default", "description"} <= set(keys.columns)
    assert keys["key"].is_unique


def test_schemas_refuse_what_the_loader_refuses(capsys):
    import jsonschema

    catalog = json.loads(_run(capsys, "schema", "catalog"))
    bad = {"switches": {"x": {"protocol": "ethernet", "ports": 4, "port_rate": "100 Gb/s",
                              "source": "s", "provenance": "assumed"}}}  # no direction
    assert not jsonschema.Draft202012Validator(catalog).is_valid(bad)
    sweep = json.loads(_run(capsys, "schema", "sweep"))
    validator = jsonschema.Draft202012Validator(sweep)
    assert not validator.is_valid({"design": "d.yaml", "metrics": ["no_such_metric"]})
    assert not validator.is_valid({"design": "d.yaml", "parameters": {"tp": {"start": 1}}})
    assert validator.is_valid({"design": "d.yaml", "parameters": {
        "tp": {"start": 1, "stop": 8, "factor": 2}}})



TIDY_VERBS = {
    "advise": (["advise", "examples/small-2x2-a100-1gbe.yaml", "--model", "llama3-8b",
                "--tp", "2", "--compute-efficiency", "0.5", "--global-batch", "64"],
               {"advise": "step_time_s"}),
    "decode": (["decode", "examples/hgx-h100-server.yaml", "--model", "llama3-70b", "--tp",
                "8", "--batch", "8"],
               {"decode_step": "time_s", "decode": "tokens_per_s_per_accelerator",
                "collectives": "time_per_step_s"}),
    "check-nccl": (["check-nccl", "tests/data/nccl/rtx4090-4gpu-allreduce.log", "--design",
                    "examples/rtx4090-workstation.yaml"],
                   {"check": "ranks", "sizes": "measured_over_model"}),
}


@pytest.mark.parametrize("verb", sorted(TIDY_VERBS))
def test_verdict_verbs_write_tidy_tables(verb, tmp_path, capsys):
    """advise, decode and check-nccl as tools read them: short table names, one row per
    observation, numbers as numbers with the unit in the column name (docs/output.md;
    advise's table was named by its 480-character paragraph, which Parquet could not
    use as a file name)."""
    argv, numeric = TIDY_VERBS[verb]
    assert main([*argv, "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(numeric) <= set(frame["table"])
    assert not _formatted_cells(frame), _formatted_cells(frame)[:5]
    assert all(len(name) <= 20 for name in frame["table"].unique())
    for table, column in numeric.items():
        rows = frame[frame.table == table].dropna(axis=1, how="all")
        assert pd.api.types.is_numeric_dtype(rows[column]), (table, column)
    if verb == "check-nccl":  # its -o is the plot
        return
    assert main([*argv, "--format", "parquet", "-o", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    for table, column in numeric.items():
        data = pd.read_parquet(tmp_path / "t" / f"{table}.parquet")
        assert pd.api.types.is_numeric_dtype(data[column])
