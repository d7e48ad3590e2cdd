import argparse
import json
import subprocess
import sys

import pytest

from topomodel.analysis.training.model import flops_per_token
from topomodel.cli import main
from topomodel.cli.parser import build_parser
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Accelerator, Model, ScaleupLink, System


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_every_command_has_help_text():
    def walk(parser, prefix):
        for name, sub in _subparsers(parser):
            assert sub.description, f"{prefix} {name} lacks a description"
            yield name
            yield from walk(sub, f"{prefix} {name}")

    names = list(walk(build_parser(), "topomodel"))
    assert {"units", "catalog", "list", "show"} <= set(names)


def test_no_option_lists_a_choice_twice():
    def walk(parser, prefix):
        for action in parser._actions:
            choices = list(action.choices or ()) if not isinstance(
                action, argparse._SubParsersAction) else []
            assert len(choices) == len(set(choices)), f"{prefix} {action.dest}: {choices}"
        for name, sub in _subparsers(parser):
            walk(sub, f"{prefix} {name}")

    walk(build_parser(), "topomodel")


def test_a_parser_for_one_verb_lists_every_verb_and_makes_that_verb_s_flags():
    """``build_parser(only=VERB)`` (what one command line builds) lists every verb with
    its help, and gives that verb the same flags, defaults and subcommands as the
    parser of every verb; the other verbs get none."""

    def flags(parser):
        return {(a.dest, tuple(a.option_strings), repr(a.default), a.help)
                for a in parser._actions}

    full = dict(_subparsers(build_parser()))
    for verb, whole in full.items():
        mine = dict(_subparsers(build_parser(only=verb)))
        assert mine.keys() == full.keys()
        assert flags(mine[verb]) == flags(whole)
        assert mine[verb]._defaults.keys() == whole._defaults.keys()
        assert dict(_subparsers(mine[verb])).keys() == dict(_subparsers(whole)).keys()
        other = next(v for v in full if v != verb)
        assert [a.dest for a in mine[other]._actions] == ["help"]
    assert build_parser(only="route").parse_args(
        ["route", "x.yaml", "--collective", "allreduce", "--size", "1GiB"]).size == "1GiB"


def test_a_mistyped_verb_is_named_with_every_verb(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["rout", "x.yaml"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'rout'" in err and all(
        f"'{verb}'" in err for verb in ("route", "plan", "serve", "units"))


def test_units_convert_prints_the_converted_value(capsys):
    status, out, _ = run(capsys, "units", "900 GB/s", "--to", "Gb/s")
    assert status == 0
    assert "7200 Gb/s" in out


def test_units_compare_and_direction_warning(capsys):
    _, out, _ = run(capsys, "units", "compare", "900 GB/s", "400 Gb/s")
    assert "18x" in out
    _, out, _ = run(capsys, "units", "compare", "900 GB/s bidir", "400 Gb/s /dir")
    assert "warning:" in out and "9x" in out
    _, out, _ = run(capsys, "units", "compare", "900 GB/s bidir", "400 Gb/s /dir",
                    "--format", "json")
    data = json.loads(out)
    assert data["ratio"] == 18 and data["ratio_per_direction"] == 9 and data["warnings"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["units", "16 GT/s", "--to", "GB/s"], "'16 GT/s': is a transfer"),
        (["units", "900 GB", "--to", "Gb/s"], "'900 GB': is a size, not a rate"),
        (["units", "400"], "'400': has no unit"),
        (["catalog", "show", "qm9770"], "unknown catalog id 'qm9770'; did you mean 'qm9700'"),
        (["catalog", "list", "--kind", "swtch"], "unknown kind 'swtch'"),
        (["catalog", "list", "--catalog", "/nonexistent.yaml"],
         "/nonexistent.yaml: cannot read the file"),
    ],
)
def test_errors_are_one_line_with_status_2(capsys, argv, message):
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("topomodel: error: ")
    assert message in lines[0]


def test_bad_catalog_file_reports_every_problem(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nics:\n  n:\n    ports: 1\n    port_rate: 400\n    protocols: [ib]\n"
                   "    source: x\n    provenance: assumed\n")
    status, _, err = run(capsys, "catalog", "list", "--catalog", str(bad))
    assert status == 2
    lines = err.strip().splitlines()
    assert lines == [
        f"topomodel: error: {bad}:4: nics.n.port_rate: 400: a bare number where a quantity"
        " is expected: write it as a string with a unit, e.g. '400 Gb/s'",
        f"topomodel: error: {bad}:5: nics.n.protocols[0]: expected one of infiniband,"
        " ethernet, got a string ('ib')",
    ]


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "md"])
def test_catalog_list_every_format(capsys, fmt):
    status, out, _ = run(capsys, "catalog", "list", "--kind", "switch", "--format", fmt)
    assert status == 0
    assert "qm9700" in out
    if fmt == "json":
        entries = json.loads(out)["entries"]
        assert {e["kind"] for e in entries} == {"switch"}


def test_catalog_show_gives_both_conventions_and_provenance(capsys):
    _, out, _ = run(capsys, "catalog", "show", "qm9700")
    assert "50 GB/s (400 Gb/s) per direction" in out
    assert "100 GB/s (800 Gb/s) bidir" in out
    assert "datasheet" in out
    _, out, _ = run(capsys, "catalog", "show", "qm9700", "--format", "json")
    data = json.loads(out)
    assert data["port_rate_Bps"] == 50e9 and data["port_rate_bps"] == 400e9


def test_catalog_override_is_reported(capsys, tmp_path):
    user = tmp_path / "mine.yaml"
    user.write_text("fibres:\n  os2:\n    loss_per_length: \"0.35 dB/km\"\n"
                    "    connector_loss: \"0.5 dB\"\n    source: lab\n    provenance: assumed\n")
    _, out, _ = run(capsys, "catalog", "list", "--kind", "fibre", "--catalog", str(user))
    assert "os2 overrides the entry from" in out


def test_python_dash_m_and_console_script_work():
    result = subprocess.run([sys.executable, "-m", "topomodel", "units", "900 GB/s", "--to",
                             "Gb/s"], capture_output=True, text=True, check=True)
    assert "7200 Gb/s" in result.stdout


EXAMPLE = "examples/dgx-h100-superpod.yaml"


def test_route_json_schema(capsys):
    status, out, _ = run(capsys, "route", "examples/hgx-h100-server.yaml", "--collective",
                         "allreduce", "--size", "256 MiB", "--format", "json")
    assert status == 0
    data = json.loads(out)
    for key in ("time_s", "algbw_Bps", "busbw_Bps", "tiers", "hotspots", "latency_s",
                "bandwidth_s", "topology_s", "size_convention", "candidates"):
        assert key in data
    assert data["time_s"] == pytest.approx(data["latency_s"] + data["bandwidth_s"]
                                           + data["topology_s"])
    # values a wrong result breaks, derived from the inputs: 256 MiB on 8 H100s, the
    # nccl-tests conventions, and NVLS (in-network reduction) winning on one HGX H100
    size, n = 256 * 2**20, 8
    assert (data["size_bytes"], data["ranks"]) == (size, n)
    assert data["algbw_Bps"] == pytest.approx(size / data["time_s"], rel=1e-12)
    assert data["busbw_Bps"] == pytest.approx(data["algbw_Bps"] * 2 * (n - 1) / n,
                                              rel=1e-12)
    assert data["algorithm"] == "innetwork"
    assert data["time_s"] == min(c["time_s"] for c in data["candidates"].values())
    assert data["candidates"][data["algorithm"]]["time_s"] == data["time_s"]
    # NVLS as NCCL runs it: each GPU sends S (1 + 1/n) up to the NVSwitches (multimem
    # loads serve its buffer, stores send its reduced slice) and gets as much back down,
    # at the NVSwitch chips' nvls_efficiency (NCCL's 0.85 on Hopper), plus NCCL's
    # pipeline fill: two loops of 16 channels x 8 heads x 64 KiB (its chunk below 1 GiB)
    assert sum(t["bytes"] for t in data["tiers"]) == pytest.approx(2 * (n + 1) * size,
                                                                   rel=1e-9)
    nvls = load_catalog().entries["nvswitch3"].nvls_efficiency
    fill = 2 * 16 * n * 65536 / size
    assert data["bandwidth_s"] == pytest.approx(size * (1 + 1 / n) * (1 + fill)
                                                / (_nvlink_per_gpu_Bps(data) * nvls),
                                                rel=1e-9)


def _nvlink_per_gpu_Bps(data):
    """One H100's NVLink rate per direction: 18 x NVLink4 from the catalog, at the
    effective / line rate the run used (the catalog's, NCCL's 20.6 of 25 GB/s)."""
    catalog = load_catalog()
    acc = catalog.get("h100-sxm", Accelerator)
    link = catalog.get(acc.scaleup_link, ScaleupLink)
    assert data["assumptions"]["efficiency"]["scaleup"] == link.efficiency
    return acc.scaleup_link_count * link.link_rate_Bps * link.efficiency


def test_route_ring_allreduce_json_values(capsys):
    status, out, _ = run(capsys, "route", "examples/hgx-h100-server.yaml", "--collective",
                         "allreduce", "--size", "256 MiB", "--algorithm", "ring",
                         "--format", "json")
    assert status == 0
    data = json.loads(out)
    size, n = 256 * 2**20, 8
    assert (data["algorithm"], data["size_bytes"], data["ranks"]) == ("ring", size, n)
    assert data["algbw_Bps"] == pytest.approx(size / data["time_s"], rel=1e-12)
    assert data["busbw_Bps"] == pytest.approx(data["algbw_Bps"] * 2 * (n - 1) / n,
                                              rel=1e-12)
    # each rank sends 2(n-1)/n of the buffer, every byte over two links (GPU -> NVSwitch
    # -> GPU): 4(n-1) buffers on the links in all
    assert sum(t["bytes"] for t in data["tiers"]) == pytest.approx(4 * (n - 1) * size,
                                                                   rel=1e-9)
    per_gpu = _nvlink_per_gpu_Bps(data)
    assert data["bandwidth_s"] == pytest.approx(2 * (n - 1) / n * size / per_gpu, rel=1e-9)
    # NCCL's ring latency: the base of the protocol used plus 2(n-1) NVLink hops
    assert data["protocol"] == "Simple"  # 256 MiB: bandwidth-bound
    assert data["latency_s"] == pytest.approx((8.4 + 2 * (n - 1) * 3.4) * 1e-6, rel=1e-9)
    assert data["topology_s"] == 0  # one switch tier, nothing oversubscribed
    assert data["time_s"] == pytest.approx(data["latency_s"] + data["bandwidth_s"])
    # the default run picks NVLS; the ring is either timed the same there or not routed
    # at all, because a bound it cannot beat is already slower than NVLS
    _, out, _ = run(capsys, "route", "examples/hgx-h100-server.yaml", "--collective",
                    "allreduce", "--size", "256 MiB", "--format", "json")
    auto = json.loads(out)
    assert auto["algorithm"] == "innetwork" and auto["time_s"] < data["time_s"]
    if "ring" in auto["candidates"]:
        assert auto["candidates"]["ring"]["time_s"] == pytest.approx(data["time_s"])


def test_route_two_group_sets_and_failures(capsys):
    status, out, _ = run(capsys, "route", EXAMPLE, "--collective", "alltoall", "--size",
                         "64 MiB", "--group", "block:8", "--group", "rail", "--fail", "spine00",
                         "--routing", "hash", "--algorithm", "direct", "--format", "json")
    assert status == 0
    data = json.loads(out)
    assert data["router"] == "structured"  # around the failed spine
    assert {"block:8", "rail"} == set(data["groups"])
    assert any(set(h["groups"]) for h in data["hotspots"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--collective", "allsum", "--size", "1 MiB"], "unknown collective 'allsum'"),
        (["--collective", "allreduce", "--size", "1 MiB/s"], "is a rate, not a size"),
        (["--collective", "allreduce", "--size", "1 MiB", "--group", "block:7"],
         "do not divide into blocks of 7"),
        (["--collective", "allreduce", "--size", "1 MiB", "--fail", "spine99"],
         "no node named 'spine99'"),
        (["--collective", "allreduce", "--size", "1 MiB", "--algorithm", "rhd",
          "--group", "0-5"], "power-of-two"),
    ],
)
def test_route_errors(capsys, argv, message):
    status, out, err = run(capsys, "route", EXAMPLE, *argv)
    assert status == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_step_json_schema(capsys):
    status, out, _ = run(capsys, "step", EXAMPLE, "--model", "llama3-8b", "--tp", "8",
                         "--dp", "127", "--format", "json", "--no-goodput")
    assert status == 0
    data = json.loads(out)
    for key in ("step_time_s", "compute_s", "exposed_comm_s", "wait_s", "bubble_s", "mfu",
                "tokens_per_s"):
        assert key in data
    assert set(data["walls"]) == {"bandwidth_s", "latency_s", "topology_s", "sync_s"}
    # values a wrong result breaks: the default global batch is 4 microbatches per
    # pipeline stage per DP replica (Layout.sequences): 508 sequences without a pipeline
    batch = 4 * 127
    world = check_step_values(data, global_batch=batch, tp=8)
    assert world == 8 * 127
    # halving --tp at the same --dp halves the world and keeps the tokens per step
    status, out, _ = run(capsys, "step", EXAMPLE, "--model", "llama3-8b", "--tp", "4",
                         "--dp", "127", "--format", "json", "--no-goodput")
    assert status == 0
    half = json.loads(out)
    assert check_step_values(half, global_batch=batch, tp=4) == world // 2
    # half the TP degree: twice the work per rank, in larger (no less efficient) GEMMs
    assert half["compute_s"] > 1.7 * data["compute_s"]
    assert half["compute_s"] <= 2 * data["compute_s"]


def check_step_values(data, *, global_batch, tp):
    """Check a ``step`` JSON for llama3-8b on the DGX H100 example against values computed
    here from the inputs and the catalog; return the layout's world (accelerators)."""
    design, catalog = load_design(EXAMPLE)
    model = catalog.get("llama3-8b", Model)
    peak = catalog.get(catalog.get(design.system, System).accelerator,
                       Accelerator).peak_flops["bf16"]
    layout = data["layout"]
    world = layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"]
    assert layout["tp"] == tp
    tokens = global_batch * model.sequence
    assert data["tokens_per_s"] * data["step_time_s"] == pytest.approx(tokens, rel=1e-9)
    model_flops, hardware = flops_per_token(model, model.sequence)
    assert data["mfu"] == pytest.approx(
        tokens * model_flops / (data["step_time_s"] * world * peak), rel=1e-9)
    # no recomputation: the hardware does FlashAttention's recomputed scores only
    assert data["hfu"] == pytest.approx(data["mfu"] * hardware / model_flops, rel=1e-9)
    # compute on the slowest rank: at least the model FLOPs at the H100's best measured
    # matmul rate (794.5 of 989.4 TFLOP/s), not more than twice that
    best = tokens * model_flops / (world * peak * 794.5 / 989.4)
    assert best < data["compute_s"] < 2 * best
    return world


def test_step_global_batch_is_the_whole_step_when_dp_fills_the_fabric(capsys):
    status, out, _ = run(capsys, "step", EXAMPLE, "--model", "llama3-8b", "--tp", "8",
                         "--global-batch", "1016", "--format", "json", "--no-goodput")
    assert status == 0
    data = json.loads(out)
    layout = data["layout"]
    assert (layout["dp"], layout["global_batch"]) == (127, 1016)
    assert check_step_values(data, global_batch=1016, tp=8) == 1016


def test_step_errors(capsys):
    status, _, err = run(capsys, "step", EXAMPLE, "--model", "llama3-9b", "--tp", "8")
    assert status == 2 and "did you mean 'llama3-8b'" in err
    status, _, err = run(capsys, "step", EXAMPLE, "--model", "llama3-8b", "--tp", "8",
                         "--dp", "200")
    assert status == 2 and "needs 1600 accelerators" in err


def test_unwritable_outputs_are_one_line_errors_before_any_work(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for argv in (["export", EXAMPLE, "--to", "json", "-o", str(blocker / "x.json")],
                 ["scale", EXAMPLE, "--model", "llama3-8b", "--tp", "8", "--plot",
                  str(blocker / "x.png")],
                 ["step", EXAMPLE, "--model", "llama3-8b", "--tp", "8",
                  "--straggler-slowdown", "-0.5"]):
        status, _, err = run(capsys, *argv)
        assert status == 2 and len(err.strip().splitlines()) == 1, argv


def test_step_takes_jitter_and_message_overhead(capsys):
    status, out, _ = run(capsys, "step", "examples/hgx-h100-server.yaml", "--model",
                         "llama3-8b", "--tp", "8", "--jitter-cv", "0", "--overhead", "10 us",
                         "--no-goodput", "--format", "json")
    data = json.loads(out)
    assert status == 0 and data["assumptions"]["jitter_cv"] == 0 and data["wait_s"] == 0
    assert data["assumptions"]["time"]["per_message_overhead_s"] == pytest.approx(10e-6)


@pytest.mark.parametrize(("argv", "message"), [
    (["--tp", "0"], "--tp: must be at least 1, got 0"),
    (["--micro-batch", "0"], "--micro-batch: must be at least 1, got 0"),
    (["--interleave", "0"], "--interleave: must be at least 1, got 0"),
    (["--compute-efficiency", "5"], "--compute-efficiency: must be in (0, 1], got 5"),
    (["--hot-expert", "0.5"], "--hot-expert: must be in [1, 1000], got 0.5"),
    (["--straggler-share", "nan"], "--straggler-share: expected a finite number"),
    (["--tp-overlap", "all"], "--tp-overlap: expected one of none, backward, gemm"),
    (["--efficiency", "leaf=1.5"], "--efficiency: must be in (0, 1], got 1.5"),
    (["--order", "tp,dp,pp"], "--order: expected tp, cp, dp, pp once each"),
    (["--bucket", "40 MB/s"], "--bucket: '40 MB/s': is a rate, not a size"),
    (["--scaleout-factor", "0"], "--scaleout-factor: must be in [0.001, 1000], got 0"),
])
def test_step_options_are_checked_by_the_one_table(capsys, argv, message):
    """Each verb's flags come from analysis.options: the same readers as sweep files."""
    for verb in ("step", "goodput", "compare"):
        designs = [EXAMPLE, EXAMPLE] if verb == "compare" else [EXAMPLE]
        status, out, err = run(capsys, verb, *designs, "--model", "llama3-8b", *argv)
        assert status == 2 and out == "", (verb, argv)
        assert len(err.strip().splitlines()) == 1 and message in err, (verb, err)


def test_seed_reaches_the_step_with_hash_routing(capsys):
    def step_json(*extra):
        status, out, _ = run(capsys, "step", "examples/dgx-h100-superpod.yaml", "--model",
                             "llama3-8b", "--tp", "8", "--dp", "64", "--order", "dp,tp,cp,pp",
                             "--routing", "hash", "--no-goodput", "--format", "json", *extra)
        assert status == 0
        return json.loads(out)

    # TP groups span 8 nodes on different rails: which spine ports their flows collide
    # on depends on the hash seed
    tp = {seed: next(c["time_s"] for c in step_json("--seed", str(seed))["comm"]
                     if c["kind"] == "tp") for seed in (0, 2)}
    assert tp[0] != tp[2], tp
    assert step_json()["comm"][0]["time_s"] == tp[0]  # the default seed is 0


def test_route_top_refuses_a_negative_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["route", EXAMPLE, "--collective", "allreduce", "--size", "1 MiB", "--top", "-3"])
    assert exit_info.value.code == 2
    assert "expected a whole number of at least 0, got '-3'" in capsys.readouterr().err


def test_scale_applies_the_scaleout_factor_and_refuses_failures(capsys):
    def curve(*extra):
        status, out, err = run(capsys, "scale", "examples/dgx-h100-superpod.yaml", "--model",
                               "llama3-8b", "--tp", "8", "--counts", "64", "256",
                               "--format", "json", *extra)
        return status, (json.loads(out)["points"] if status == 0 else err)

    status, base = curve()
    _, faster = curve("--scaleout-factor", "4")
    assert status == 0 and [p["accelerators"] for p in base] == [64, 256, 1016]
    # DP gradients cross the scale-out network: 4x faster links never slow the step and
    # speed it up where the DP reduction is not hidden behind the backward pass
    pairs = list(zip(faster, base, strict=True))
    assert all(f["tokens_per_s"] >= b["tokens_per_s"] for f, b in pairs)
    assert any(f["tokens_per_s"] > b["tokens_per_s"] for f, b in pairs)
    status, err = curve("--fail", "spine00")
    assert status == 2 and "--fail: scale builds the design at several sizes" in err


def test_draw_colours_links_with_the_route_time_model(capsys, tmp_path):
    argv = ["--collective", "allreduce", "--size", "64 MiB", "--efficiency", "scaleup=0.5",
            "--format", "json"]
    status, out, _ = run(capsys, "route", EXAMPLE, *argv)
    routed = json.loads(out)
    status2, out2, _ = run(capsys, "draw", EXAMPLE, "-o", str(tmp_path / "d.svg"),
                           "--route", "allreduce", "--size", "64 MiB",
                           "--efficiency", "scaleup=0.5", "--format", "json")
    drawn = json.loads(out2)
    assert status == status2 == 0
    assert drawn["time_s"] == pytest.approx(routed["time_s"])
    assert drawn["peak_utilization"] == pytest.approx(max(t["peak_utilization"]
                                                          for t in routed["tiers"]))


def test_a_closed_pipe_is_not_an_error(tmp_path):
    command = (f"{sys.executable} -m topomodel build examples/dgx-h100-superpod.yaml"
               " --format md | head -n 2")
    done = subprocess.run(["bash", "-c", "set -o pipefail; " + command], capture_output=True,
                          text=True, timeout=120)
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_options_lists_the_one_table_and_the_sweep_docs_name_every_option(capsys):
    from pathlib import Path

    from topomodel.analysis.options import DECODE_OPTIONS, OPTIONS, SERVE_OPTIONS

    status, out, _ = run(capsys, "options", "--format", "json")
    listed = json.loads(out)["options"]
    assert status == 0 and [o["key"] for o in listed] == list(OPTIONS)
    verbs = build_parser()._subparsers._group_actions[0].choices
    for opt in OPTIONS.values():
        verb = ("decode" if opt.key in DECODE_OPTIONS else
                "serve" if opt.key in SERVE_OPTIONS else "step")
        help_text = verbs[verb].format_help()
        assert opt.flag in help_text
        # the flag's help is the option's own text (one text for CLI, sweeps, review)
        assert " ".join(opt.doc.split()[:3]) in " ".join(help_text.split())
    sweeps = Path("docs/sweeps.md").read_text()
    missing = [k for k, o in OPTIONS.items() if o.arg != "pairs"
               and k not in DECODE_OPTIONS + SERVE_OPTIONS and f"`{k}`" not in sweeps]
    assert not missing, f"docs/sweeps.md does not name {missing}"


@pytest.mark.parametrize("verb", ["step", "goodput", "review"])
def test_a_global_batch_that_is_not_whole_microbatches_is_refused(capsys, tmp_path, verb):
    extra = ["-o", str(tmp_path / "r")] if verb == "review" else []
    status, out, err = run(capsys, verb, "examples/hgx-h100-server.yaml", "--model",
                           "llama3-8b", "--dp", "8", "--global-batch", "100", *extra)
    assert status == 2 and not out
    assert err.strip() == ("topomodel: error: --global-batch 100 is not a multiple of DP x"
                           " micro-batch = 8 x 1 = 8: the step would run 96 sequences; give"
                           " a multiple of 8 (e.g. 96 or 104)")
    assert not (tmp_path / "r").exists()


def test_a_global_batch_of_whole_microbatches_runs_as_given(capsys):
    status, out, _ = run(capsys, "step", "examples/hgx-h100-server.yaml", "--model",
                         "llama3-8b", "--dp", "8", "--micro-batch", "2", "--global-batch",
                         "96", "--format", "json", "--no-goodput")
    assert status == 0
    assert json.loads(out)["global_batch"] == 96


def test_a_size_in_bits_runs_and_warns(capsys):
    status, out, _ = run(capsys, "route", "examples/hgx-h100-server.yaml", "--collective",
                         "allreduce", "--size", "1 Gib", "--format", "json")
    data = json.loads(out)
    assert status == 0 and data["size_bytes"] == 2**30 / 8
    assert ("--size '1 Gib' is in bits (134.2 MB); sizes are usually bytes: did you mean"
            " '1 GiB'?") in data["warnings"]
    _, out, _ = run(capsys, "route", "examples/hgx-h100-server.yaml", "--collective",
                    "allreduce", "--size", "1 GiB", "--format", "json")
    assert not any("bits" in w for w in json.loads(out).get("warnings", []))


def test_the_cli_reference_documents_every_option_of_every_verb():
    """docs/cli.md is the parser's help (``python -m topomodel.cli.reference``): every
    verb and option is in it; on the Python that wrote it, word for word (argparse's
    layout changes between Python versions)."""
    from pathlib import Path

    from topomodel.cli.reference import _parsers, cli_reference

    written = Path("docs/cli.md").read_text()
    by_prog = {text.split("`", 1)[0]: text for text in written.split("\n## `")[1:]}
    for parser in _parsers(build_parser()):
        section = by_prog[parser.prog]
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert all(flag in section for flag in action.option_strings), (
                    parser.prog, action.option_strings)
    if sys.version_info[:2] == (3, 11):
        assert written == cli_reference(), "run: python -m topomodel.cli.reference > docs/cli.md"


@pytest.mark.parametrize("value", ["-1", "0", "x"])
def test_workers_says_at_least_1(capsys, value):
    with pytest.raises(SystemExit) as caught:
        main(["step", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
              "--workers", value])
    assert caught.value.code == 2
    assert f"expected a whole number of at least 1, got '{value}'" in capsys.readouterr().err


LAB = "examples/small-2x2-a100-1gbe.yaml"
LAB_FLAGS = ("--model", "llama3-8b", "--compute-efficiency", "0.5")


def test_step_says_first_whether_the_layout_fits_and_states_its_batch(capsys):
    """Among the step's first rows: the memory verdict (a misfit in capitals, not only
    a warning at the end) and the global batch with its microbatches and its rule."""
    status, out, _ = run(capsys, "step", LAB, *LAB_FLAGS, "--dp", "4", "--no-goodput")
    assert status == 0
    head = "\n".join(out.splitlines()[:8])
    assert "DOES NOT FIT: needs" in head
    assert "16 sequences (131,072 tokens), 4 microbatches per pipeline; default:" in out
    status, out, _ = run(capsys, "step", LAB, *LAB_FLAGS, "--tp", "2", "--dp", "2",
                         "--global-batch", "64", "--no-goodput")
    assert status == 0
    assert "fits:" in "\n".join(out.splitlines()[:8]) and "; given" in out


@pytest.mark.parametrize("verb", ["goodput", "scale"])
def test_goodput_and_scale_state_the_global_batch(capsys, verb):
    status, out, _ = run(capsys, verb, LAB, *LAB_FLAGS, "--tp", "2", "--dp", "2")
    assert status == 0
    assert "global batch" in "\n".join(out.splitlines()[:6])


def test_the_program_leaves_its_objects_to_the_exit(capsys, monkeypatch, tmp_path):
    """``main()`` as the program freezes the garbage collector's objects at its end (the
    shutdown's walk over them found nothing to free); with ``argv`` given it does not,
    and the program's figures are the in-process ones."""
    import gc
    import os
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[2] / "examples" / "dgx-h100-superpod.yaml")
    argv = ["route", example, "--collective", "allreduce", "--size", "1 GiB", "--format",
            "json"]
    monkeypatch.setenv("TOPOMODEL_CACHE_DIR", str(tmp_path))
    before = gc.get_freeze_count()
    _, in_process, _ = run(capsys, *argv)
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(sys, "argv", ["topomodel", *argv])
    try:
        assert main() == 0
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    assert capsys.readouterr().out == in_process
    program = subprocess.run([sys.executable, "-m", "topomodel", *argv], capture_output=True,
                             text=True, check=True,
                             env={**os.environ, "TOPOMODEL_CACHE_DIR": str(tmp_path)})
    assert program.stdout == in_process
