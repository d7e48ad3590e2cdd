"""Hostile input through the whole CLI (issue 20): mutated catalogs, designs, sweep files
and argument sets either run (exit 0, every printed number finite) or fail with exit
status 2 and one ``topomodel: error:`` line per problem; never a traceback.

The examples are derived from a fixed seed (``derandomize``) so a failure repeats. The
default run keeps to small designs and a budget of about a minute on the project's
2-core machine; ``pytest --run-slow`` runs the tests below at 150 examples (the profile
of conftest.py) and :func:`test_slow_hostile_inputs`, 200 examples, over every shipped
design (more than 10 minutes).
"""

from __future__ import annotations

import contextlib
import io
import re
import resource
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from topomodel.cli import main

ROOT = Path(__file__).resolve().parents[2]
CATALOGS = {p.name: p.read_text(encoding="utf-8")
            for p in sorted((ROOT / "catalogs").glob("*.yaml"))}
SMALL_DESIGNS = ("hgx-h100-server.yaml", "dgx-h100-superpod.yaml", "mi300x-roce.yaml",
                 "cloudmatrix384.yaml", "gb200-nvl72-cluster.yaml", "tpu-v4-pod.yaml")
ALL_DESIGNS = tuple(sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
SWEEPS = tuple(sorted(p.name for p in (ROOT / "examples" / "sweeps").glob("*.yaml")))


@pytest.fixture(autouse=True, scope="module")
def bounded_memory():
    """Cap this process's address space while the fuzz runs (4 GiB above what it holds),
    so an unbounded allocation fails the test with a MemoryError instead of exhausting
    a shared machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * resource.getpagesize()
    cap = held + 4 * 2**30
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _settings(examples: int | None = None) -> settings:
    # no shrinking: an example runs the CLI for up to seconds, and the failing input is
    # already printed draw by draw; examples None: as the profile of conftest.py says
    # (25, or 150 with --run-slow)
    counts = {} if examples is None else {"max_examples": examples}
    return settings(**counts, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


FAST = _settings()

# What the 10,500 inputs were made of: values at and past every edge.
HOSTILE_NUMBERS = ["0", "-1", "1", "2", "18446744073709551616", "1000000000", "1e400",
                   "1.0e+308", "1.0e-300", ".nan", ".inf", "-.inf", "²", "0x_", "0b_",
                   "!!int abc", "!!float x", "!!timestamp 2024-13-45", "!!bool maybe",
                   "1_000", "07", "1:30"]
HOSTILE_QUANTITIES = ['"2**1024 GB"', '"9**9**9 GB"', '"1e400 GB/s /dir"',
                      '"1e308 TB/s bidir"', '"1e-300 Gb/s /dir"', '"0 W"', '"-5 dB"',
                      '"nan GB"', '"inf s"', '"1 GB**1000"', '"400 Gb/s"', '"5e-324 m"',
                      '"1e30 s"', '"3 GHz"', '"16 GT/s"', '"1e21 FLOP/s"']
HOSTILE_STRUCTURE = ["&a [*a]", "[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]", "{}", "[]", "~", "",
                     '"a\\0b"', "{x: 1}", "[1, 2, [3]]", "*undefined", "!!set {a}",
                     "!!python/object:os.system x"]
HOSTILE_VALUES = HOSTILE_NUMBERS + HOSTILE_QUANTITIES + HOSTILE_STRUCTURE

LAUGHS = "\n".join(
    ["laugh0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"laugh{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)])

# a NaN or an infinity as Python prints it ("nan W", "-inf"), not a word of a name
_NONFINITE = re.compile(r"(?<![\w.-])[-+]?(nan|inf)(?![\w-])")
_ERROR = re.compile(r"^topomodel(?: [\w-]+)*: error: \S")  # argparse names the verb too
_USAGE = re.compile(r"^(usage: |\s|\S.*\.\.\.$|topomodel (\S+ )?(\[|[A-Z]))")


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in this process; fail the test on a traceback of any kind."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's own usage errors and --help
            status = exc.code if isinstance(exc.code, int) else 2
    return status, out.getvalue(), err.getvalue()


def assert_clean(argv: list[str]) -> int:
    """Exit 0 with finite numbers, or exit 2 with one line per problem."""
    status, out, err = run_cli(argv)
    assert "Traceback" not in err, (argv, err)
    if status == 0:
        bad = _NONFINITE.search(out)
        assert bad is None, (argv, out[max(0, bad.start() - 200):bad.end() + 50])
        return status
    assert status == 2, (argv, status, err)
    lines = err.strip().splitlines()
    errors = [line for line in lines if _ERROR.match(line)]
    assert errors, (argv, err)
    # besides the error lines, only argparse's usage text and the sweep's point count
    others = [line for line in lines if line not in errors and not _USAGE.match(line)
              and not line.startswith("topomodel: sweep ")]
    assert not others, (argv, err)
    return status


def mutate(text: str, data: st.DataObject) -> str:
    """``text`` with one to four lines deleted, doubled, cut, or given a hostile value."""
    lines = text.splitlines() or [""]
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        line = lines[index]
        action = data.draw(st.sampled_from(["value", "value", "value", "delete", "duplicate",
                                            "truncate", "laughs"]), label="action")
        if action == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[index] = f"{key}: {data.draw(st.sampled_from(HOSTILE_VALUES), label='value')}"
        elif action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, line)
        elif action == "truncate":
            lines[index] = line[: data.draw(st.integers(0, len(line)), label="cut")]
        elif action == "laughs":
            lines.append(LAUGHS)
        lines = lines or [""]
    return "\n".join(lines) + "\n"


def _write(directory: str, name: str, text: str) -> str:
    path = Path(directory) / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def check_catalog(data: st.DataObject, designs: tuple[str, ...]) -> None:
    name = data.draw(st.sampled_from(sorted(CATALOGS)), label="catalog")
    design = str(ROOT / "examples" / data.draw(st.sampled_from(designs), label="design"))
    with tempfile.TemporaryDirectory() as directory:
        catalog = _write(directory, name, mutate(CATALOGS[name], data))
        verb = data.draw(st.sampled_from(["list", "build", "show"]), label="verb")
        argv = {"list": ["catalog", "list", "--catalog", catalog],
                "show": ["catalog", "show", "qm9700", "--catalog", catalog],
                "build": ["build", design, "--catalog", catalog]}[verb]
        assert_clean(argv)


def check_design(data: st.DataObject, designs: tuple[str, ...]) -> None:
    name = data.draw(st.sampled_from(designs), label="design")
    text = mutate((ROOT / "examples" / name).read_text(encoding="utf-8"), data)
    with tempfile.TemporaryDirectory() as directory:
        # a design's catalogs are relative to it: keep the shipped ones reachable
        (Path(directory) / "catalogs").symlink_to(ROOT / "examples" / "catalogs")
        path = _write(directory, name, text)
        verb = data.draw(st.sampled_from(["build", "build", "route", "step"]), label="verb")
        argv = {"build": ["build", path],
                "route": ["route", path, "--collective", "allreduce", "--size", "1 MiB",
                          "--group", "system"],
                "step": ["step", path, "--model", "llama3-8b", "--no-goodput"]}[verb]
        assert_clean([*argv, "--format", data.draw(st.sampled_from(["table", "json"]))])


def check_sweep(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(SWEEPS), label="sweep")
    text = (ROOT / "examples" / "sweeps" / name).read_text(encoding="utf-8")
    text = re.sub(r"^design: \.\./", f"design: {ROOT / 'examples'}/", text, flags=re.M)
    lines = mutate(text, data).splitlines()
    hostile_ranges = ["{start: 1, stop: 2, num: 10000000}", "{start: 1, stop: 2, step: 1.0e-300}",
                      "{start: 1, stop: 2, step: .nan}", "{start: 1, stop: 1.0e+308, factor: 1.1}",
                      "{start: -1.0e+308, stop: 1.0e+308, step: 1.0e+307}",
                      "{start: 1.0e-300, stop: 1.0e+300, factor: 1.0000001}",
                      "{start: 1, stop: 8, factor: 2, format: 7}"]
    extra = data.draw(st.sampled_from([
        "", "metrics: [{a: 1}]", "metrics: [[1]]",
        "constraints: ['" + "not " * 400 + "fits']",
        "constraints: ['" + "-" * 900 + "1 < 2']",
        f"parameters: {{scaleout_factor: {data.draw(st.sampled_from(hostile_ranges))}}}"]),
        label="extra")
    if extra:
        key = extra.split(":", 1)[0]
        lines = [line for line in lines if not line.startswith(f"{key}:")] + [extra]
    with tempfile.TemporaryDirectory() as directory:
        path = _write(directory, name, "\n".join(lines) + "\n")
        limit = data.draw(st.sampled_from(["100000", "1", "0", "-3", "10**9"]), label="max")
        assert_clean(["sweep", path, "--dry-run", "--max-points", limit,
                      "--catalog-dir", str(ROOT / "examples")])


_ARGUMENT_VALUES = ["0", "-1", "1", "3", "18446744073709551616", "1e-300", "1e300", "nan",
                    "inf", "²", "", "x"]
_SIZES = ["1 MiB", "2**1024 GB", "1e400 GB", "0 B", "1e-300 B", "1 GB**9", "9**9**9 GB",
          "nan B", "1 GiB/s", ""]
_GROUPS = ["all", "block:²", "block:0", "stride:3", "0-100000000000", "0,1", "0-1",
           "domain", "rail", "-5", "3-1"]


def check_arguments(data: st.DataObject, designs: tuple[str, ...]) -> None:
    design = str(ROOT / "examples" / data.draw(st.sampled_from(designs), label="design"))
    pick = data.draw
    verb = pick(st.sampled_from(["units", "route", "step", "scale", "build"]), label="verb")
    if verb == "units":
        words = pick(st.lists(st.sampled_from([*_SIZES, "compare", "900 GB/s bidir",
                                                "1e300 EB/s"]),
                              min_size=1, max_size=3), label="words")
        argv = ["units", *words]
        if pick(st.booleans()):
            argv += ["--to", pick(st.sampled_from(["Gb/s", "b", "1/s", "GB**2", "x"]))]
    elif verb == "route":
        argv = ["route", design, "--collective",
                pick(st.sampled_from(["allreduce", "alltoall", "sendrecv", "bogus"])),
                "--size", pick(st.sampled_from(_SIZES)), "--group",
                pick(st.sampled_from(_GROUPS)), "--top", pick(st.sampled_from(_ARGUMENT_VALUES))]
    elif verb == "build":
        argv = ["build", design, "--max-flow-nodes", pick(st.sampled_from(["0", "-5", "100"]))]
    else:
        flags = pick(st.lists(st.sampled_from(
            ["--tp", "--pp", "--dp", "--ep", "--cp", "--micro-batch", "--global-batch",
             "--seq", "--interleave", "--scaleout-factor", "--jitter-cv", "--hot-expert",
             "--straggler-slowdown", "--seed"]), max_size=3, unique=True), label="flags")
        argv = [verb, design, "--model", pick(st.sampled_from(["llama3-8b", "nope"]))]
        for flag in flags:
            argv += [flag, pick(st.sampled_from(_ARGUMENT_VALUES))]
        if verb == "scale":
            argv += ["--counts", *pick(st.lists(st.sampled_from(
                ["8", "0", "18446744073709551616", "100000000"]), min_size=1, max_size=2))]
        else:
            argv += ["--no-goodput"]
    assert_clean(argv)


@FAST
@given(data=st.data())
def test_mutated_catalogs(data):
    check_catalog(data, SMALL_DESIGNS[:3])


@FAST
@given(data=st.data())
def test_mutated_designs(data):
    check_design(data, SMALL_DESIGNS)


@FAST
@given(data=st.data())
def test_mutated_sweep_files(data):
    check_sweep(data)


@FAST
@given(data=st.data())
def test_odd_arguments(data):
    check_arguments(data, ("hgx-h100-server.yaml", "dgx-h100-superpod.yaml"))


@pytest.mark.slow
@_settings(200)
@given(data=st.data())
def test_slow_hostile_inputs(data):
    kind = data.draw(st.sampled_from(["catalog", "design", "sweep", "arguments"]))
    if kind == "catalog":
        check_catalog(data, ALL_DESIGNS)
    elif kind == "design":
        check_design(data, ALL_DESIGNS)
    elif kind == "sweep":
        check_sweep(data)
    else:
        check_arguments(data, ALL_DESIGNS)
