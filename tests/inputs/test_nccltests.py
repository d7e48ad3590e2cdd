"""nccl-tests logs: reading them (analysis/nccltests.py) and holding them against the
model (analysis/collectives/measured.py, ``topomodel check-nccl``).

Real logs are in tests/data/nccl (cited in its README); synthetic ones are written here
with the printf widths of nccl-tests' ``src/common.cu``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from topomodel.analysis.collectives.measured import check_nccl, log_collective
from topomodel.cli import main
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.measured.nccltests import LogError, parse_nccl_tests, read_nccl_tests
from topomodel.traffic.collectives import busbw_factor

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "nccl"
EXAMPLES = ROOT / "examples"
TESTS = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
         "reducescatter": "reduce_scatter_perf", "alltoall": "alltoall_perf",
         "sendrecv": "sendrecv_perf"}


@cache
def fabric(name: str):
    design, catalog = load_design(EXAMPLES / f"{name}.yaml")
    return build_fabric(design, catalog)


def header(hosts: list[tuple[str, int]], *, step: str = "2(factor)") -> list[str]:
    """The parameter line and device block, as nccl-tests prints them (one line per rank)."""
    ranks = [(h, d) for h, count in hosts for d in range(count)]
    lines = [f"# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: {step} warmup iters:"
             " 5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {h:>10s} device {d:2d} [0x{r:02x}]"
              " NVIDIA A100-PCIE-40GB" for r, (h, d) in enumerate(ranks)]
    return [*lines, "#"]


TABLE = [
    "#                                                              out-of-place"
    "                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)       "]


def _time_text(time_us: float) -> str:
    return (f"{time_us:7.0f}" if time_us >= 10000 else f"{time_us:7.1f}" if time_us >= 100
            else f"{time_us:7.2f}")


def row(size: int, time_s: float, collective: str, n: int, *, dtype: str = "float") -> str:
    """One result row with both column groups at ``time_s``, widths of src/common.cu."""
    word = 4
    count = size // word if collective in ("allreduce", "sendrecv") else size // word // n
    op = "sum" if collective in ("allreduce", "reducescatter") else "none"
    alg = size / time_s / 1e9
    bus = alg * busbw_factor(collective, n)
    group = f"  {_time_text(time_s * 1e6)}  {alg:6.2f}  {bus:6.2f}  {0:5d}"
    return f"{size:12d}  {count:12d}  {dtype:>8s}  {op:>6s}  {-1:6d}" + group + group


def footer(average: float = 1.0) -> list[str]:
    return ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average:g}", "#", ""]


def model_log(name: str, collective: str, sizes: list[int], hosts: list[tuple[str, int]],
              *, scale: dict[int, float] | None = None, named: bool = True) -> str:
    """A log whose times are the model's on ``name`` (times ``scale[size]``)."""
    from topomodel.analysis.collectives.collective import run_collective

    f = fabric(name)
    per_system = f.structure.accelerators_per_system
    ranks = [i * per_system + d for i, (_, count) in enumerate(hosts) for d in range(count)]
    spec = ",".join(map(str, ranks))
    rows = []
    for size in sizes:
        run = run_collective(f, collective, float(size), [spec])
        rows.append(row(size, run.time_s * (scale or {}).get(size, 1.0), collective,
                        len(ranks)))
    command = [f"./build/{TESTS[collective]} -b 8 -e 1G -f 2"] if named else []
    return "\n".join(command + header(hosts) + TABLE + rows + footer())


def write(tmp_path: Path, text: str, name: str = "run.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- reading -----------------------------------------------------------------------


def test_the_published_4090_log_reads_every_field():
    log = read_nccl_tests(DATA / "rtx4090-4gpu-allreduce.log")
    assert log.test == "all_reduce_perf"
    assert [(p.rank, p.host, p.device, p.bus_id) for p in log.ranks] == [
        (0, "7773x", 0, "0000:85:00"), (1, "7773x", 1, "0000:86:00"),
        (2, "7773x", 2, "0000:89:00"), (3, "7773x", 3, "0000:8d:00")]
    assert log.ranks[0].device_name == "NVIDIA GeForce RTX 4090"
    assert (log.threads, log.gpus_per_thread, log.min_bytes, log.max_bytes, log.step) == (
        1, 4, 268435456, 2147483648, "2(factor)")
    first, last = log.rows[0], log.rows[-1]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (
        268435456, 67108864, "float", "sum", -1)
    assert first.out_of_place.time_s == pytest.approx(15654e-6)
    assert first.out_of_place.algbw_Bps == pytest.approx(17.15e9)
    assert last.in_place.busbw_Bps == pytest.approx(25.95e9)
    assert last.in_place.wrong == 0
    assert [r.line for r in log.rows] == [13, 14, 15]
    # the excerpt ends before the footer: read, with a warning
    assert log.out_of_bounds is None and "footer" in log.warnings[0]


def test_mpirun_tag_prefixes_and_na_columns_are_read():
    log = parse_nccl_tests("\n".join(
        f"[1,0]<stdout>:{line}" for line in [*TABLE[1:], row(1024, 20e-6, "allreduce", 8),
                                             *footer(0.09)]))
    assert log.rows[0].size_bytes == 1024 and log.average_busbw_Bps == pytest.approx(0.09e9)
    sendrecv = read_nccl_tests(DATA / "a100-8gpu-sendrecv.log")
    assert sendrecv.test == "sendrecv_perf"
    assert sendrecv.rows[-1].in_place.wrong is None  # 'N/A'
    assert sendrecv.rows[-1].out_of_place.busbw_Bps == pytest.approx(195.10e9)


def test_nccl_info_lines_between_the_rows_are_passed_over():
    text = "\n".join([*TABLE, "node1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via"
                      " NET/Socket/0", row(8, 20e-6, "allreduce", 2),
                      "NCCL version 2.21.5+cuda12.4", row(16, 20e-6, "allreduce", 2),
                      *footer()])
    assert [r.size_bytes for r in parse_nccl_tests(text).rows] == [8, 16]


def test_the_older_layout_without_group_root_and_with_an_error_column():
    # nccl-tests before 2.11: no 'Group' on device lines, no root column, 'error' column
    log = read_nccl_tests(DATA / "older-layout.log")
    assert [p.host for p in log.ranks] == ["server", "server"]
    assert [(r.size_bytes, r.redop, r.root) for r in log.rows] == [(32, "sum", None),
                                                                  (64, "sum", None)]
    assert log.rows[0].out_of_place.wrong == 0 and log.rows[1].out_of_place.wrong is None


def test_an_out_of_place_only_table():
    text = "\n".join(["#       size         count      type   redop    root     time   algbw"
                      "   busbw #wrong",
                      f"{1024:12d}  {256:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
                      f"  {20.0:7.2f}  {0.05:6.2f}  {0.09:6.2f}  {0:5d}", *footer()])
    assert parse_nccl_tests(text).rows[0].in_place is None


def test_multi_process_header_lists_every_host():
    log = parse_nccl_tests("\n".join(header([("nodeA", 2), ("nodeB", 2)]) + TABLE
                                     + [row(1024, 30e-6, "allreduce", 4)] + footer()))
    assert log.hosts == ("nodeA", "nodeB")
    assert [(p.host, p.device) for p in log.ranks] == [("nodeA", 0), ("nodeA", 1),
                                                       ("nodeB", 0), ("nodeB", 1)]


@pytest.mark.parametrize(("text", "match"), [
    ("hello\nno table here\n", r"<log>: no nccl-tests result table"),
    ("\n".join(TABLE) + "\n", r"<log>:2: no result rows after the column header"),
    ("      1024   256  float  sum  -1  20.0 0.05 0.09 0\n", r"<log>:1: a result row before"),
    ("\n".join([*TABLE, "        1024           256     float     sum      -1    20.00"]),
     r"<log>:4: truncated: the last result row has 6 of 13 columns"),
    ("\n".join([*TABLE, "        1024           256     float     sum      -1    20.00",
                row(2048, 20e-6, "allreduce", 2), *footer()]),
     r"<log>:4: malformed result row: 6 of 13 columns"),
    ("\n".join([*TABLE, row(1024, 20e-6, "allreduce", 2) + "  7"]),
     r"<log>:4: malformed result row: 14 columns"),
    ("\n".join([*TABLE, row(1024, 20e-6, "allreduce", 2).replace("0.05", "x.yz")]),
     r"<log>:4: malformed result row: a field is not a number"),
    ("\n".join([*TABLE, row(1024, 20e-6, "allreduce", 2), *TABLE]),
     r"<log>:6: a second result table \(the first starts at line 2\)"),
    ("\n".join([*TABLE, row(1024, 20e-6, "allreduce", 2),
                row(2048, 20e-6, "allreduce", 2).replace("float", " half")]),
     r"<log>:5: rows of more than one data type or reduction \(float/sum, half/sum\)"),
    ("./all_reduce_perf\n./all_gather_perf\n" + "\n".join(
        [*TABLE, row(1024, 20e-6, "allreduce", 2)]),
     r"<log>:2: the log names more than one test"),
    ("#  size count type redop root time algbw busbw #wrong time algbw\n",
     r"<log>:1: a column header nccl-tests does not print"),
])
def test_a_bad_log_gives_one_error_naming_the_line(text, match):
    with pytest.raises(LogError, match=match) as caught:
        parse_nccl_tests(text)
    assert len(caught.value.problems) == 1


def test_published_truncated_and_interleaved_logs_are_refused():
    with pytest.raises(LogError, match=r"p5-tagged-truncated.log:7: truncated"):
        read_nccl_tests(DATA / "p5-tagged-truncated.log")
    with pytest.raises(LogError, match=r"interleaved-two-printers.log:9: size 8 appears"
                       r" twice \(lines 3 and 9\)"):
        read_nccl_tests(DATA / "interleaved-two-printers.log")
    with pytest.raises(LogError, match=r"missing.log: cannot read"):
        read_nccl_tests(DATA / "missing.log")


def test_failed_validation_is_a_warning():
    text = "\n".join([*TABLE, row(1024, 20e-6, "allreduce", 2).replace("      0", "     12"),
                      "# Out of bounds values : 2 FAILED", "# Avg bus bandwidth    : 1"])
    assert "failed nccl-tests' validation" in parse_nccl_tests(text).warnings[0]


# --- the collective a log ran ------------------------------------------------------


@pytest.mark.parametrize("collective", list(TESTS))
def test_the_collective_comes_from_the_test_name_or_the_rows(collective):
    hosts = [("h", 4)]
    body = header(hosts) + TABLE + [row(4096, 30e-6, collective, 4)] + footer()
    named = parse_nccl_tests("\n".join([f"./{TESTS[collective]} -g 4", *body]))
    assert log_collective(named) == collective
    unnamed = parse_nccl_tests("\n".join(body))
    if collective in ("allgather", "alltoall"):  # the same columns: the name decides
        with pytest.raises(UsageError, match="fit allgather and alltoall: give"
                           " --collective"):
            log_collective(unnamed)
        assert log_collective(unnamed, collective) == collective
    else:
        assert log_collective(unnamed) == collective


def test_a_given_collective_must_agree_with_the_log():
    log = read_nccl_tests(DATA / "rtx4090-4gpu-allreduce.log")
    with pytest.raises(ParameterError, match="collective: allgather, but the log names"
                       " all_reduce_perf"):
        log_collective(log, "allgather")


# --- against the model -------------------------------------------------------------


def test_the_published_4090_run_is_within_10_percent_of_the_model():
    """4 x RTX 4090 on one EPYC (tinygrad/open-gpu-kernel-modules #36) measured 25.7-25.95
    GB/s AllReduce busbw; the model's ring at NCCL's PCIe Gen4 figure gives 24 GB/s
    (NVIDIA's GTC24 bar for PCI Gen4 is also 24)."""
    check = check_nccl(fabric("rtx4090-workstation"),
                       read_nccl_tests(DATA / "rtx4090-4gpu-allreduce.log"))
    assert check.collective == "allreduce" and check.ranks == 4
    assert check.rank_nodes == ("sys0/acc0", "sys0/acc1", "sys0/acc2", "sys0/acc3")
    for size in check.sizes:
        assert size.ratio == pytest.approx(1.0, abs=0.10)
        assert size.model_busbw_Bps == pytest.approx(24e9, rel=0.02)
        assert size.bottleneck == "scaleup" and not size.below
    assert not check.flagged


@pytest.mark.parametrize("collective", list(TESTS))
def test_every_collective_reaches_the_pcie_figure_at_large_sizes(collective):
    """On 4 GPUs under one root complex each GPU's x16 link limits every collective, so
    busbw at 1 GiB is NCCL's 24 GB/s whatever the collective: the size convention
    (total buffer for AllGather, ReduceScatter and AlltoAll) is the one nccl-tests uses;
    a per-rank reading would be off by the rank count."""
    text = model_log("rtx4090-workstation", collective, [2**30], [("ws", 4)])
    check = check_nccl(fabric("rtx4090-workstation"), parse_nccl_tests(text))
    assert check.collective == collective
    assert check.sizes[0].model_busbw_Bps == pytest.approx(24e9, rel=0.05)
    assert check.sizes[0].ratio == pytest.approx(1.0, abs=0.01)


def test_only_the_sizes_below_the_model_by_more_than_the_threshold_are_flagged():
    sizes = [2**k for k in range(10, 31, 4)]
    scale = {sizes[1]: 1.5, sizes[3]: 1.2, sizes[5]: 1 / 0.75}  # 67 %, 83 %, 75 % of model
    text = model_log("small-4x8-l40s-25gbe", "allreduce", sizes,
                     [("n0", 8), ("n1", 8), ("n2", 8), ("n3", 8)], scale=scale)
    f = fabric("small-4x8-l40s-25gbe")
    check = check_nccl(f, parse_nccl_tests(text))
    assert [s.size_bytes for s in check.flagged] == [sizes[1], sizes[5]]
    assert check.sizes[3].ratio == pytest.approx(1 / 1.2, rel=0.01)
    strict = check_nccl(f, parse_nccl_tests(text), threshold=0.1)
    assert [s.size_bytes for s in strict.flagged] == [sizes[1], sizes[3], sizes[5]]
    # across four servers on one 25GbE NIC each, the NIC link is what saturates
    assert check.bottleneck == "leaf"


def test_ranks_follow_hosts_and_devices_or_the_given_spec():
    f = fabric("small-16x8-a100-100gbe-roce")
    text = model_log("small-16x8-a100-100gbe-roce", "allreduce", [2**24],
                     [("b", 2), ("a", 2)])
    check = check_nccl(f, parse_nccl_tests(text))
    assert check.rank_nodes == ("sys00/acc0", "sys00/acc1", "sys01/acc0", "sys01/acc1")
    moved = check_nccl(f, parse_nccl_tests(text), ranks="0,1,16,17")
    assert moved.rank_nodes == ("sys00/acc0", "sys00/acc1", "sys02/acc0", "sys02/acc1")
    with pytest.raises(UsageError, match="give one group of the log's 4 ranks"):
        check_nccl(f, parse_nccl_tests(text), ranks="0-7")


def test_ranks_that_do_not_fit_the_design_are_refused():
    text = model_log("small-4x8-l40s-25gbe", "allreduce", [2**20], [("a", 8), ("b", 8)])
    small = fabric("small-2x2-a100-1gbe")
    with pytest.raises(UsageError, match="CUDA device 7; the design's systems have 2"):
        check_nccl(small, parse_nccl_tests(text))
    many = "\n".join(header([(f"h{i}", 1) for i in range(3)]) + TABLE
                     + [row(2**20, 1e-3, "allreduce", 3)] + footer())
    with pytest.raises(UsageError, match="ran on 3 hosts; the design has 2 systems"):
        check_nccl(small, parse_nccl_tests(many))
    sendrecv = (DATA / "a100-8gpu-sendrecv.log").read_text().splitlines()
    bare = parse_nccl_tests("\n".join(line for line in sendrecv if "_perf" not in line))
    with pytest.raises(UsageError, match="no '#  Rank' device lines"):
        check_nccl(fabric("hgx-h100-server"), bare, collective="sendrecv")  # no count
    with pytest.raises(ParameterError, match=r"^threshold: a share in"):
        check_nccl(small, parse_nccl_tests(many), threshold=1.5)


def test_without_device_lines_busbw_over_algbw_gives_the_rank_count():
    check = check_nccl(fabric("small-2x2-a100-1gbe"),
                       read_nccl_tests(DATA / "h100-2node-tree-allreduce.log"),
                       ranks="0,2")
    assert check.ranks == 2 and check.rank_nodes == ("sys0/acc0", "sys1/acc0")


def test_sockets_over_1_gbe_limit_the_two_server_cluster():
    """Two servers on 1 GbE under NCCL's sockets transport: the NIC link saturates at
    0.8 x 125 MB/s (transports.SOCKETS_EFFICIENCY). A ring over the 4 ranks crosses each NIC
    once per direction, so its busbw is that 100 MB/s; auto picks the 2-node tree, whose
    busbw is not a wire rate (it moves fewer bytes through the NIC than busbw counts)."""
    from topomodel.analysis.collectives.collective import run_collective

    f = fabric("small-2x2-a100-1gbe")
    ring = run_collective(f, "allreduce", 2.0**30, ["all"], algorithm="ring")
    assert ring.busbw_Bps == pytest.approx(0.8 * 125e6, rel=0.01)
    text = model_log("small-2x2-a100-1gbe", "allreduce", [2**30], [("x", 2), ("y", 2)])
    size = check_nccl(f, parse_nccl_tests(text)).sizes[0]
    assert size.bottleneck == "leaf" and size.algorithm == "tree"
    assert size.model_busbw_Bps > ring.busbw_Bps


# --- the command ---------------------------------------------------------------------


def test_check_nccl_prints_per_size_rows_and_writes_the_plot(tmp_path, capsys):
    plot = tmp_path / "busbw.png"
    status = main(["check-nccl", str(DATA / "rtx4090-4gpu-allreduce.log"), "--design",
                   str(EXAMPLES / "rtx4090-workstation.yaml"), "-o", str(plot),
                   "--format", "json"])
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective"] == "allreduce" and data["bottleneck"] == "scaleup"
    assert [s["size_bytes"] for s in data["sizes"]] == [2**28, 2**29, 2**30]
    assert data["flagged_sizes_bytes"] == []
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_nccl_table_names_the_flag_and_the_bottleneck(tmp_path, capsys):
    sizes = [2**20, 2**26]
    log = write(tmp_path, model_log("small-4x8-l40s-25gbe", "allgather", sizes,
                                    [("n0", 8), ("n1", 8)], scale={2**26: 2.0}))
    assert main(["check-nccl", str(log), "--design",
                 str(EXAMPLES / "small-4x8-l40s-25gbe.yaml")]) == 0
    out = capsys.readouterr().out
    assert "BELOW" in out and "1 of 2 sizes measured more than 20% below the model" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--threshold", "0"], "--threshold: a share in (0, 1)"),
    (["-o", "plot.jpg"], "plot.jpg: a figure file ends in .png, .svg or .pdf"),
])
def test_check_nccl_refuses_bad_options_with_one_line(args, message, capsys):
    status = main(["check-nccl", str(DATA / "rtx4090-4gpu-allreduce.log"), "--design",
                   str(EXAMPLES / "rtx4090-workstation.yaml"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and message in err[0]


def test_check_nccl_on_a_truncated_log_is_one_error_line(capsys):
    status = main(["check-nccl", str(DATA / "p5-tagged-truncated.log"), "--design",
                   str(EXAMPLES / "rtx4090-workstation.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith("topomodel: error: ") and "p5-tagged-truncated.log:7:" in err[0]


# --- placement and NCCL settings from the log's command line ------------------------


def test_a_two_node_log_without_device_lines_runs_on_two_systems():
    """NVIDIA/nccl-tests #232: mpirun --hostfile -np 2, -g 1, NCCL_ALGO=Tree, no device
    lines. One process per system, so the model crosses the scale-out (not NVLink), runs
    the tree and says where it placed the ranks."""
    log = read_nccl_tests(DATA / "h100-2node-tree-allreduce.log")
    assert log.launch.processes == 2 and log.launch.multi_host
    check = check_nccl(fabric("dgx-h100-superpod"), log)
    systems = {name.split("/")[0] for name in check.rank_nodes}
    assert len(systems) == 2 and check.bottleneck != "scaleup"
    assert {s.algorithm for s in check.sizes} == {"tree"}
    assert "NCCL_ALGO=Tree" in check.algorithm
    assert any("lists no hosts or devices" in w and "one process per system" in w
               for w in check.warnings)
    assert not check.flagged  # within 20 %: 0.9-1.05 of the model over 2-32 MiB
    one = check_nccl(fabric("hgx-h100-server"), log)  # one system: said, not hidden
    assert any("probably spanned hosts" in w for w in one.warnings)


def test_a_log_without_hosts_or_a_launcher_warns_of_the_placement():
    text = "\n".join([*TABLE, row(2**20, 1e-3, "allreduce", 4), *footer()])
    check = check_nccl(fabric("rtx4090-workstation"), parse_nccl_tests(text))
    assert check.rank_nodes[0].endswith("0") and len(check.rank_nodes) == 4
    assert any("the design's first 4 accelerators" in w for w in check.warnings)
    listed = model_log("rtx4090-workstation", "allreduce", [2**20], [("a", 4)])
    assert check_nccl(fabric("rtx4090-workstation"), parse_nccl_tests(listed)).warnings == ()


@pytest.mark.parametrize(("setting", "algorithm", "protocol"), [
    ("NCCL_ALGO=Ring NCCL_PROTO=LL128 ", "ring", "LL128"),
    ("NCCL_PROTO=^LL,LL128 ", None, "Simple"),
    ("NCCL_ALGO=tree ", "tree", None)])
def test_the_logs_nccl_algo_and_proto_are_honoured(setting, algorithm, protocol):
    body = model_log("small-4x8-l40s-25gbe", "allreduce", [2**24], [("a", 8), ("b", 8)],
                     named=False)
    log = parse_nccl_tests(f"{setting}./build/all_reduce_perf -b 8 -e 1G -g 1\n" + body)
    size = check_nccl(fabric("small-4x8-l40s-25gbe"), log).sizes[0]
    assert algorithm is None or size.algorithm == algorithm
    assert protocol is None or size.protocol == protocol
    forced = check_nccl(fabric("small-4x8-l40s-25gbe"), log, algorithm="ring",
                        protocol="Simple").sizes[0]
    assert (forced.algorithm, forced.protocol) == ("ring", "Simple")


def test_nccl_info_lines_set_the_algorithm_and_conflicts_are_warned():
    body = model_log("small-4x8-l40s-25gbe", "allreduce", [2**24], [("a", 8), ("b", 8)])
    log = parse_nccl_tests("n0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree\n"
                           "export NCCL_ALGO=Ring\n" + body)
    assert log.launch.nccl["NCCL_ALGO"] == "Tree"
    assert any("NCCL_ALGO is set to Tree and to Ring" in w for w in log.warnings)
    assert check_nccl(fabric("small-4x8-l40s-25gbe"), log).sizes[0].algorithm == "tree"


def test_check_nccl_takes_algorithm_and_protocol_flags(capsys):
    assert main(["check-nccl", str(DATA / "h100-2node-tree-allreduce.log"), "--design",
                 str(EXAMPLES / "dgx-h100-superpod.yaml"), "--algorithm", "ring",
                 "--protocol", "LL128", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {(s["algorithm"], s["protocol"]) for s in data["sizes"]} == {("ring", "LL128")}
    assert data["algorithm"] == "ring" and data["protocol"] == "LL128"
    assert len({n.split("/")[0] for n in data["rank_accelerators"]}) == 2
    assert any("lists no hosts or devices" in w for w in data["warnings"])
