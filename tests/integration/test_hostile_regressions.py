"""Regression tests for issue 20 ("Hostile input"): one per traceback site, hang and
memory blow-up it lists, built from the input that reached it, plus the limits and
checks that now stop them (``topomodel.limits``)."""

from __future__ import annotations

import json
import re
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from topomodel import limits
from topomodel.analysis.training.studies import layout_for, scale_curve
from topomodel.cli import main
from topomodel.errors import (
    CatalogError,
    DesignError,
    InputError,
    ParameterError,
    RoutingError,
    UnitError,
    UsageError,
)
from topomodel.fabric.build import build_fabric
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.inputs.records import Invalid
from topomodel.inputs.units import convert, parse
from topomodel.inputs.yamlsource import load_yaml
from topomodel.report.output import Report, nonfinite_result
from topomodel.sweep import compile_constraint, load_sweep
from topomodel.sweep.file import SweepError
from topomodel.traffic.collectives import collective_traffic
from topomodel.traffic.groups import parse_groups
from topomodel.traffic.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SUPERPOD = EXAMPLES / "dgx-h100-superpod.yaml"
ERROR_LINE = re.compile(r"^topomodel: error: \S")


def one_error(capsys, *argv: str) -> str:
    """Run the CLI; it must exit 2 with exactly one error line and no traceback."""
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), err
    return lines[0]


# yamlsource.py _to_python ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["name: &a\n  x: *a\n", "a: &a [*a]\n",
                                  "a: &a {b: [1, {c: *a}]}\n"])
def test_a_recursive_alias_is_refused_not_a_recursion_error(text):
    with pytest.raises(InputError, match=r"x.yaml:1: invalid YAML: a recursive alias"):
        load_yaml("x.yaml", text=text)


def test_an_alias_repeated_twice_is_still_fine():
    assert load_yaml("x.yaml", text="a: &a [1, 2]\nb: *a\nc: *a\n").data["c"] == [1, 2]


def test_billion_laughs_stops_at_the_node_limit_quickly():
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"] + [
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    started = time.perf_counter()
    with pytest.raises(InputError, match=f"more than {limits.MAX_YAML_NODES:,} nodes"
                       r" \(topomodel.limits.MAX_YAML_NODES"):
        load_yaml("laughs.yaml", text="\n".join(lines) + "\n")
    assert time.perf_counter() - started < 10  # 9^10 nodes unbounded


def test_document_length_and_nesting_are_limited():
    with pytest.raises(InputError, match=r"big.yaml: the document is 1,048,577 characters,"
                       r" more than the limit of 1,048,576 \(topomodel.limits"):
        load_yaml("big.yaml", text="#" * (limits.MAX_YAML_CHARACTERS + 1))
    deep = "a: " + "[" * 990 + "]" * 990 + "\n"  # was a RecursionError
    with pytest.raises(InputError, match="nested more than 64 levels deep"):
        load_yaml("deep.yaml", text=deep)


def test_a_catalog_of_300000_entries_is_refused_before_it_is_read():
    entry = "  sw{i}: {{protocol: ethernet, ports: 64, port_rate: 400 Gb/s /dir}}\n"
    text = "switches:\n" + "".join(entry.format(i=i) for i in range(30_000))
    started = time.perf_counter()
    with pytest.raises(InputError, match="MAX_YAML"):
        load_yaml("huge.yaml", text=text * 10)
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(("value", "tag"), [("!!int abc", "int"), ("0x_", "int"),
                                            ("0b_", "int"), ("!!float abc", "float"),
                                            ("!!timestamp abc", "timestamp"),
                                            ("!!bool maybe", "bool")])
def test_a_scalar_its_tag_cannot_read_is_a_catalog_error(tmp_path, value, tag):
    text = (ROOT / "catalogs" / "switches.yaml").read_text()
    path = tmp_path / "switches.yaml"
    path.write_text(text.replace("\n    ports: 64\n", f"\n    ports: {value}\n", 1))
    line = text[:text.index("\n    ports: 64\n")].count("\n") + 2  # the line of that key
    with pytest.raises(CatalogError, match=rf"switches.yaml:{line}: switches.qm9700.ports:"
                       rf" cannot read '.*' as {tag}"):
        load_catalog([path])


def test_a_nul_byte_in_a_file_name_is_a_clean_error(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text('system: hgx-h100\nsystems: 1\nscaleout: {kind: none}\n'
                      'catalogs: ["a\\0b"]\n')
    assert "holds a NUL byte" in one_error(capsys, "build", design)


# units.py quantity ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "message"), [
    ("2**1024 GB", "size", "no arithmetic"), ("9**9**9 GB", "size", "no arithmetic"),
    ("1 GB**1000", "size", "no arithmetic"), ("1e400 GB", "size", "not a finite number"),
    ("1e308 TB", "size", "between 1 b and 1 ZB"),
    ("1e-300 Gb/s", "rate", "between 1 b/s and 1 EB/s"),
    ("2000 yr", "time", "between 0 s and 1000 yr"),
    ("5e-324 m", "length", "between 1 mm and 40000 km")])
def test_quantities_are_finite_and_in_their_kinds_range(text, kind, message):
    with pytest.raises(UnitError, match=re.escape(message)):
        parse(text, kind)


def test_conversions_that_overflow_are_refused(capsys):
    with pytest.raises(UnitError, match="more than the largest size"):
        convert("1e300 EB", "b")
    assert "no arithmetic" in one_error(capsys, "units", "2**1024 GB")
    assert "too far apart" in one_error(capsys, "units", "compare", "1e-300 GB", "1e300 GB")


def test_a_quantity_at_the_edge_of_its_range_still_reads():
    assert parse("1 EB/s", "rate") == 1e18 and parse("1 b", "size") == 0.125
    assert parse("0.1 /yr", "failure_rate") > 0 and convert("1 1/s", "1/s") == (1.0, "1/s")


# sweep_file.py _range and _read_metrics; sweep_constraints.py ---------------------------------

SWEEP = f"""\
design: {SUPERPOD.name}
fixed: {{model: llama3-8b, global_batch: 1024}}
"""


def sweep_at(path: Path, text: str) -> None:
    """Write the sweep file ``path`` and, beside it, the design it names."""
    (path.parent / SUPERPOD.name).write_text(SUPERPOD.read_text())
    path.write_text(text)


@pytest.mark.parametrize(("parameters", "message"), [
    ("{start: 1, stop: 2, num: 10000000}", "10,000,000 values: more than the 100,000"),
    ("{start: 1, stop: 2, step: 1.0e-300}", "infinitely many values"),
    ("{start: 1, stop: 2, step: .nan}", "expected a finite number, got nan"),
    ("{start: -1.0e+308, stop: 1.0e+308, step: 1.0e+307}", "infinitely many values"),
    ("{start: 1.0e-300, stop: 1.0e+300, factor: 1.0000001}", "13,815,511,241 values"),
    ("{start: 1, stop: 2, step: 0}", "a step of 0"),
    ("{start: 1, stop: " + "9" * 400 + ", step: 1}", "too large for a float")])
def test_ranges_are_counted_before_they_are_made(tmp_path, parameters, message):
    path = tmp_path / "s.yaml"
    sweep_at(path, SWEEP + f"parameters: {{scaleout_factor: {parameters}}}\n")
    started = time.perf_counter()
    with pytest.raises(SweepError, match=re.escape(message)):
        load_sweep(path)
    assert time.perf_counter() - started < 30


def test_a_sweep_states_its_count_and_max_points_raises_the_limit(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    sweep_at(path, SWEEP + "parameters: {tp: [1, 2, 4, 8], pp: [1, 2]}\n")
    with pytest.raises(SweepError, match=r"8 points \(about 7.81 KiB to hold\) is more than"
                       r" the limit of 4; .* --max-points"):
        load_sweep(path, max_points=4)
    assert len(load_sweep(path, max_points=8).points) == 8
    assert "--max-points" in one_error(capsys, "sweep", path, "--dry-run", "--max-points", "4")
    assert main(["sweep", str(path), "--dry-run", "--max-points", "8"]) == 0
    capsys.readouterr()
    single = tmp_path / "one.yaml"
    sweep_at(single, SWEEP)
    assert main(["sweep", str(single), "-o", str(tmp_path / "r.csv"), "--workers", "1"]) == 0
    assert "topomodel: sweep one: 1 points (limit 100,000, --max-points)" in (
        capsys.readouterr().err)


def test_max_points_zero_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    sweep_at(path, SWEEP)
    with pytest.raises(SystemExit) as caught:
        main(["sweep", str(path), "--dry-run", "--max-points", "0"])
    assert caught.value.code == 2
    assert "expected a whole number of at least 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("metrics", ["[{a: 1}]", "[[1]]", "[~]"])
def test_a_metric_that_is_not_a_name_is_a_sweep_error(tmp_path, metrics):
    path = tmp_path / "s.yaml"
    sweep_at(path, SWEEP + f"metrics: {metrics}\n")
    with pytest.raises(SweepError, match=r"metrics\[0\]: expected a metric name, got"):
        load_sweep(path)


@pytest.mark.parametrize(("text", "message"), [
    ("not " * 3000 + "fits", "longer than the limit of 1,000"),
    ("not " * 200 + "fits", "nests more than 32 levels deep"),
    ("-" * 900 + "1 < 2", "nests more than 32 levels deep"),
    ("+".join(["1"] * 300) + " < 2", "nests more than 32 levels deep")])
def test_a_long_or_deep_constraint_is_refused_not_a_recursion_error(text, message):
    with pytest.raises(Invalid, match=message):
        compile_constraint(text)
    assert compile_constraint("not not fits")({"fits": True}) is True


# studies.py layout_for; step.py step_time -------------------------------------------------


def test_layout_for_refuses_a_cell_larger_than_the_world():
    with pytest.raises(UsageError, match="do not hold TP x PP x CP = 18446744073709551616"):
        layout_for(1016, Layout(tp=2**64))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--global-batch", str(1016 * 2**54), "tokens per step is more than the limit"),
    ("--micro-batch", str(2**64), "tokens per step is more than the limit"),
    ("--seq", str(2**64), "1.8e+19 tokens per sequence is more than the limit of 16,777,216"),
    ("--tp", str(2**64), "do not hold TP x PP x CP"),
    ("--ep", str(2**64), "do not hold TP x PP x CP"),
    ("--tp", "0", "--tp: must be at least 1, got 0"),
    ("--scaleout-factor", "1e-300", "--scaleout-factor: must be in [0.001, 1000]"),
    ("--jitter-cv", "1e300", "--jitter-cv: must be in [0, 10]")])
def test_zero_or_huge_layout_sizes_are_one_line_errors(capsys, flag, value, message):
    line = one_error(capsys, "step", SUPERPOD, "--model", "llama3-8b", flag, value,
                     "--no-goodput")
    assert message in line


def test_microbatches_are_limited_before_the_pipeline_is_scheduled(capsys):
    line = one_error(capsys, "step", SUPERPOD, "--model", "llama3-8b", "--dp", "1",
                     "--global-batch", "100000", "--no-goodput")
    assert "100,000 microbatches per pipeline is more than the limit of 65,536" in line


@pytest.mark.parametrize("bucket", ["1 b", "100 B"])
def test_gradient_buckets_are_limited_before_they_are_timed(capsys, bucket):
    line = one_error(capsys, "step", SUPERPOD, "--model", "llama3-8b", "--bucket", bucket,
                     "--no-goodput")
    assert "gradient buckets in one pipeline stage" in line and "--bucket" in line


def test_scale_counts_are_limited(toy):
    design, catalog = load_design(SUPERPOD)
    with pytest.raises(ParameterError, match=r"counts: 1.8e\+19 accelerators is more than"):
        scale_curve(design, catalog, catalog.get("llama3-8b", Model), Layout(), [2**64])
    with pytest.raises(ParameterError, match="counts: 33 counts"):
        scale_curve(design, catalog, catalog.get("llama3-8b", Model), Layout(), list(range(1, 34)))


# groups.py _positive ----------------------------------------------------------------------


class _Acc:
    accelerators = np.arange(8)


@pytest.mark.parametrize("spec", ["block:²", "stride:²", "block:١"])
def test_a_group_size_with_a_superscript_digit_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="expected a positive whole number after ':'"):
        parse_groups(_Acc(), spec)


def test_a_rank_range_past_the_fabric_is_refused_before_it_is_made():
    with pytest.raises(UsageError, match=r"rank 100000000000 does not exist \(ranks 0-7\)"):
        parse_groups(_Acc(), "0-100000000000")  # was a 745 GiB np.arange


# build.py _build_scaleout, build_fabric -----------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ("systems: 127", "systems: 18446744073709551616"),
    ("systems: 127", "systems: 1000000000"),
    ("rail_optimized: true", "rail_optimized: true\n  nics_per_system: 18446744073709551616")])
def test_huge_counts_are_refused_with_their_memory_before_building(tmp_path, change,
                                                                     message):
    path = tmp_path / "d.yaml"
    path.write_text(SUPERPOD.read_text().replace(change, message))
    design, catalog = load_design(path)
    started = time.perf_counter()
    with pytest.raises(DesignError, match=r"is more than the limit of [\d,]+ \(topomodel"
                       ) as caught:
        build_fabric(design, catalog)
    assert time.perf_counter() - started < 5
    text = str(caught.value)
    assert "NICs per system" in text or re.search(r"about \S+ (TiB|EiB) to build", text)


def test_the_largest_examples_are_within_the_limits():
    for name in ("100k-4k-supernodes.yaml", "100k-8npu-servers.yaml"):
        design, catalog = load_design(EXAMPLES / name)
        from topomodel.fabric.build import check_size
        from topomodel.inputs.parts import System

        system = catalog.get(design.system, System)
        check_size(design, system, design.systems or 0)  # does not raise


def test_an_all_rank_all_to_all_is_refused_with_its_memory_where_it_is_listed(capsys):
    """Over all 24,576 ranks a direct All-to-All is counted under even ECMP (it runs);
    hash routing (this RoCE fabric's default: its Tomahawk switches do no adaptive
    routing) would list its 604 M pairs and is refused with their memory."""
    args = ["route", str(EXAMPLES / "llama3-24k-roce.yaml"), "--collective", "alltoall",
            "--size", "1 GiB", "--algorithm", "direct"]
    assert main([*args, "--routing", "ecmp", "--format", "json"]) == 0
    routed = json.loads(capsys.readouterr().out)
    assert routed["ranks"] == 24576 and routed["router"] == "structured"
    line = one_error(capsys, *args, "--routing", "hash")
    assert "603,955,200 All-to-All flows (about 225 GiB to list) is more than the" \
           " limit of 16,777,216" in line


def test_the_flow_limit_is_checked_before_the_flows_are_made(toy):
    fabric = toy("""\
        system: toy-host
        systems: 8
        scaleout: {kind: fat_tree, switch: toy-switch-16}
        """)
    small = collective_traffic(fabric, "alltoall", [fabric.accelerators], 1e6,
                               algorithm="direct")
    assert small.phases[0].flows == 8 * 7
    many = [fabric.accelerators] * (limits.MAX_FLOWS // 56 + 1)
    with pytest.raises(ValueError, match="pairwise All-to-All flows"):
        collective_traffic(fabric, "alltoall", many, 1e6, algorithm="pairwise")
    direct = collective_traffic(fabric, "alltoall", many, 1e6, algorithm="direct").phases[0]
    assert direct.flows == 56 * len(many)  # counted: its pairs are not listed
    with pytest.raises(RoutingError, match=r"All-to-All flows .* than the limit of"
                       r" 16,777,216 \(topomodel.limits.MAX_FLOWS\)"):
        direct.src  # noqa: B018 - listing them is what the limit stops


def test_a_direct_all_to_all_over_the_flow_limit_is_routed_from_counts(toy, monkeypatch):
    """The limit stops listing pairs, not a direct All-to-All: under even ECMP on an
    intact structured fabric it is routed from counts at any size; hash routing lists
    its pairs and is refused."""
    import topomodel.limits as limits
    from topomodel.routing import route

    fabric = toy("""\
        system: toy-host
        systems: 8
        scaleout: {kind: fat_tree, switch: toy-switch-16}
        """)
    phase = collective_traffic(fabric, "alltoall", [fabric.accelerators], 1e6,
                               algorithm="direct").phases[0]
    expected = route(fabric, phase).link_bytes
    monkeypatch.setattr(limits, "MAX_FLOWS", 55)  # the phase has 56 flows
    over = collective_traffic(fabric, "alltoall", [fabric.accelerators], 1e6,
                              algorithm="direct").phases[0]
    assert (route(fabric, over).link_bytes == expected).all()
    with pytest.raises(RoutingError, match="MAX_FLOWS"):
        route(fabric, over, routing="hash")


# routing.py route_structured; tiers.py _ports_at ---------------------------------------------


def test_the_structured_router_with_failed_links_routes_around_them(tmp_path, capsys):
    """Once a ValueError traceback; the structured router now routes around failed parts
    (#16), so the request runs and the failed link carries nothing."""
    path = tmp_path / "d.yaml"
    path.write_text(SUPERPOD.read_text() + 'failures:\n  links: ["sys004/nic2 -- leaf02"]\n')
    assert main(["route", str(path), "--collective", "allreduce", "--size", "1 GiB",
                 "--router", "structured", "--algorithm", "ring", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["router"] == "structured" and data["unroutable_flows"] == 0


def test_a_nan_port_count_is_refused_before_review(tmp_path, capsys):
    catalog = tmp_path / "switches.yaml"
    catalog.write_text((ROOT / "catalogs" / "switches.yaml").read_text().replace(
        "\n    ports: 64\n", "\n    ports: .nan\n", 1))
    line = one_error(capsys, "review", SUPERPOD, "-o", tmp_path / "out", "--catalog", catalog)
    assert "switches.qm9700.ports: expected a whole number, got a bare number (nan)" in line
    assert not (tmp_path / "out").exists()


# results are finite before they are printed --------------------------------------------------


def test_a_non_finite_result_is_an_error_not_a_printed_nan(monkeypatch, capsys):
    import topomodel.cli.design_verbs.units as units

    monkeypatch.setattr(units, "run", lambda args: Report(
        "units", {"values": [{"value": float("inf"), "unit": "b"}]}))
    line = one_error(capsys, "units", "1 GB")
    assert line == ("topomodel: error: a result is not a finite number (data.values[0].value):"
                    " the inputs are outside the range the model computes")
    assert nonfinite_result(Report("x", {"a": np.float64("nan")})) == "data.a"


def test_the_limits_are_documented():
    doc = (ROOT / "docs" / "limits.md").read_text()
    names = [n for n in dir(limits) if n.isupper()]
    assert names and all(f"`{n}`" in doc for n in names), [
        n for n in names if f"`{n}`" not in doc]


def test_the_fixtures_are_what_the_tests_say():
    # the inputs above are the shipped example's: a change there must show here
    assert "systems: 127" in SUPERPOD.read_text()
    assert "rail_optimized: true" in SUPERPOD.read_text()
    assert "\n    ports: 64\n" in (ROOT / "catalogs" / "switches.yaml").read_text()
    assert textwrap.dedent(SWEEP).startswith("design: ")


# the command line names the option a bad value came from ----------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["units", "900 GB/s", "--to", "frobs"], "--to: 'frobs': unknown unit 'frobs'"),
    (["units", "900 GQ/s"], "'900 GQ/s': unknown unit 'GQ'"),
    (["route", SUPERPOD, "--collective", "allreduce", "--size", "400 GB/s"],
     "--size: '400 GB/s': is a rate, not a size"),
    (["route", SUPERPOD, "--collective", "allreduce", "--size", "1 GiB", "--fail", "nosuch",
      "--fail-link", "a b"], "--fail: no node named 'nosuch'; --fail-link: expected"),
    (["route", SUPERPOD, "--collective", "allreduce", "--size", "1 GiB", "--top", "x"],
     "topomodel route: error: argument --top:"),
    (["frobnicate"], "invalid choice: 'frobnicate'")])
def test_a_bad_option_is_one_line_naming_it(capsys, argv, message):
    assert message in cli_error(capsys, argv)


def cli_error(capsys, argv) -> str:
    """The CLI's one error line (exit 2), argparse's own among them (by SystemExit)."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert re.match(r"^topomodel( [\w-]+)?: error: \S", lines[0])
    return lines[0]


HGX = EXAMPLES / "hgx-h100-server.yaml"


@pytest.mark.parametrize(("argv", "message"), [
    (["build", HGX, "--max-flow-nodes", "-5"], "--max-flow-nodes: expected a whole number"),
    (["build", HGX, "--catalog-dir", "no/such/dir"], "--catalog-dir: no folder"),
    (["build", HGX, "--catalog-dir", HGX], "is not a folder"),
    (["plan", HGX, "--model", "llama3-8b", "--fixed", "tp=16", "--no-progress"],
     "no layout to search with --fixed tp=16"),
    (["decode", HGX, "--model", "llama3-70b", "--tp", "8", "--context", str(10**12)],
     "--context: 1e+12 tokens per sequence is more than the limit"),
    (["decode", HGX, "--model", "llama3-70b", "--tp", "8", "--batch", str(10**12)],
     "--batch x --context:"),
    (["scale", SUPERPOD, "--model", "llama3-8b", "--tp", "8", "--counts", "100000"],
     "--counts: 100000: the design grown to 12,500 systems cannot be built:"
     " scaleout.switch"),
    (["sweep", EXAMPLES / "sweeps" / "b200-16k-fabric.yaml", "--dry-run", "--pareto", "foo",
      "bar"], "'foo' is not a recorded metric")])
def test_values_that_used_to_run_are_refused(capsys, argv, message):
    assert message in cli_error(capsys, argv)


# issue 44: legal designs with nothing across their domains ----------------------------------

SERVER = EXAMPLES / "hgx-h100-server.yaml"


@pytest.fixture
def two_servers(tmp_path):
    """2 x hgx-h100 and no scale-out network (legal: scale-out is optional)."""
    path = tmp_path / "two.yaml"
    path.write_text(SERVER.read_text().replace("systems: 1\n", "systems: 2\n"))
    return path


def test_unjoined_domains_have_a_bisection_of_zero_said_in_words(two_servers, tmp_path,
                                                                 capsys):
    assert main(["build", str(two_servers), "--format", "json"]) == 0
    cut = json.loads(capsys.readouterr().out)["bisection"]
    assert cut["bisection_Bps"] == 0 and cut["ratio"] is None
    assert main(["build", str(two_servers)]) == 0
    assert ("0 B/s (0 b/s) per direction: no network joins the halves (separate scale-up"
            " domains and no scale-out)") in capsys.readouterr().out
    assert main(["review", str(two_servers), "-o", str(tmp_path / "r")]) == 0
    assert "no network joins the halves" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r" / "report.json").read_text())["summary"]
    assert summary["bisection_Bps"] == 0 and summary["bisection_ratio"] is None


def test_a_job_across_unjoined_domains_is_refused_and_one_inside_runs(two_servers, tmp_path,
                                                                      capsys):
    for verb in (["step"], ["review", "-o", str(tmp_path / "r")]):
        line = one_error(capsys, *verb, two_servers, "--model", "llama3-8b")
        assert ("the layout's 16 accelerators (tp x pp x dp x cp) span 2 scale-up domains,"
                " and no network joins them (scale-out: none)") in line
        assert "at most 8 accelerators" in line
        assert main([*verb, str(two_servers), "--model", "llama3-8b", "--dp", "8"]) == 0
        capsys.readouterr()
    line = one_error(capsys, "step", two_servers, "--model", "llama3-8b", "--dp", "8",
                     "--pp", "2")
    assert "span 2 scale-up domains" in line
    # route times what has a path and says what has none
    assert main(["route", str(two_servers), "--collective", "allreduce", "--size", "1 GiB"]
                ) == 0
    assert "have no path and were NOT delivered" in capsys.readouterr().out
    assert main(["route", str(two_servers), "--collective", "allreduce", "--size", "1 GiB",
                 "--group", "domain"]) == 0


def test_a_bisection_without_closed_form_or_max_flow_says_so(capsys):
    pcie = EXAMPLES / "rtx4090-workstation.yaml"
    assert main(["build", str(pcie), "--max-flow-nodes", "0", "--format", "json"]) == 0
    cut = json.loads(capsys.readouterr().out)["bisection"]
    assert cut["bisection_Bps"] is None and cut["ratio"] is None
    assert main(["build", str(pcie), "--max-flow-nodes", "0"]) == 0
    assert ("bisection         not computed: no closed form for this structure, and the"
            " fabric's 5 nodes are more than the max-flow limit of 0 (--max-flow-nodes)"
            ) in capsys.readouterr().out


# issue 44: extreme accepted values -----------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["route", SERVER, "--collective", "allreduce", "--size", "1 GiB"],
    ["scale", SERVER, "--model", "llama3-8b"],
    ["draw", SERVER, "-o", "{tmp}/d.png", "--route", "allreduce", "--size", "1 GiB"]])
def test_a_vanishing_efficiency_is_one_line_not_a_recursion_error(tmp_path, capsys, argv):
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in argv]
    line = one_error(capsys, *argv, "--efficiency", "scaleup=1e-320")
    assert "a collective's time is not a finite number" in line
    assert "(numpy: overflow encountered in divide)" in line  # folded in, not printed above
    assert not (tmp_path / "d.png").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_review_with_an_infinite_step_is_one_line_before_any_figure(tmp_path, capsys,
                                                                       workers):
    line = one_error(capsys, "review", SERVER, "--model", "llama3-8b", "--tp", "8",
                     "--compute-efficiency", "1e-320", "-o", tmp_path / "out",
                     "--workers", workers)
    assert line == ("topomodel: error: a result is not a finite number (step.step_time_s):"
                    " the inputs are outside the range the model computes")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_huge_time_is_printed_short_not_in_hundreds_of_digits(capsys):
    assert main(["step", str(SERVER), "--model", "llama3-8b", "--tp", "8",
                 "--compute-efficiency", "1e-300"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^step time +\d\.\d+e\+\d{3} s$", out, re.M), out
    assert max(len(line) for line in out.splitlines()) < 200


@pytest.mark.parametrize("argv", [
    ["step", SERVER, "--model", "llama3-8b", "--tp", "9" * 3000],
    ["step", SERVER, "--model", "llama3-8b", "--efficiency", "scaleup=" + "x" * 3000],
    ["step", SERVER, "--model", "x" * 3000]])
def test_an_over_long_value_is_shortened_in_its_error(capsys, argv):
    line = cli_error(capsys, argv)  # the parser's errors and the CLI's alike
    assert len(line) < 400 and "..." in line, line[:300]


def test_a_count_in_a_table_has_separators(capsys):
    big = ["--global-batch", "2048"]  # 16M tokens: counts in the hundreds of thousands
    assert main(["step", str(SERVER), "--model", "llama3-8b", "--tp", "8", *big]) == 0
    out = capsys.readouterr().out
    assert re.search(r"allgather \(ring\) .* 397,312 ", out), out  # calls per step
    assert main(["step", str(SERVER), "--model", "llama3-8b", "--tp", "8", *big,
                 "--format", "csv"]) == 0
    assert ",397312," in capsys.readouterr().out  # machines get the plain number
