"""The PyTorch profiler trace reader (inputs/measured/kineto.py) on real traces: two
recorded on this machine with torch.profiler (gloo, tests/data/traces/gloo-2rank, and
afresh when torch is installed) and a hand-written excerpt of NCCL GPU kernels in
Kineto's format (tests/data/traces/nccl-excerpt)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from topomodel.inputs.measured.kineto import (
    TraceError,
    dtype_bytes,
    kind_of,
    nccl_kernel,
    parse_trace,
    read_trace,
    read_traces,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
GLOO = DATA / "gloo-2rank"
NCCL = DATA / "nccl-excerpt"

#: The recorder's model: two Linear(256, 256) layers, fp32 gradients in one bucket.
GRAD_BYTES = 2 * (256 * 256 + 256) * 4


def test_the_nccl_excerpt_reads_every_kernel_field():
    trace = read_trace(NCCL / "rank0.json")
    assert (trace.rank, trace.world_size, trace.backend, trace.device) == (0, 8, "nccl", "gpu")
    kinds = [(c.kind, c.size_bytes, c.group_size, c.group, c.stream, c.algorithm, c.protocol)
             for c in trace.collectives[:4]]
    assert kinds == [
        ("reducescatter", 2 * 67108864, 8, "0", "stream 20", "RING", "LL128"),
        ("allreduce", 2 * 67108864, 8, "0", "stream 20", "RING", "LL128"),
        ("allgather", 2 * 67108864, 8, "0", "stream 20", "RING", "LL128"),
        ("sendrecv", 2 * 1048576, 2, "3", "stream 24", "", "")]
    assert trace.collectives[1].duration_s == pytest.approx(610e-6)
    # the record_param_comms CPU op is no collective and no compute; the gemms are compute
    assert len(trace.collectives) == 8 and len(trace.compute_start_s) == 3
    # a GPU trace's steps are the GPU's ProfilerStep spans, not the CPU's
    assert [(s.number, s.start_s, s.duration_s) for s in trace.steps] == [
        (10, pytest.approx(1.0), pytest.approx(0.01)),
        (11, pytest.approx(1.01), pytest.approx(0.01))]
    assert trace.warnings == ()


def test_the_recorded_gloo_traces_read_every_step_and_all_reduce():
    traces = read_traces([GLOO])
    assert [t.rank for t in traces] == [0, 1]
    for trace in traces:
        assert (trace.world_size, trace.backend, trace.device) == (2, "gloo", "cpu")
        assert [s.number for s in trace.steps] == [1, 2, 3, 4]
        sizes = sorted({c.size_bytes for c in trace.collectives})
        assert sizes == [4.0, GRAD_BYTES]  # the loss (one fp32) and the gradients
        assert all(c.kind == "allreduce" and c.group_size == 2 and c.source == "gloo"
                   for c in trace.collectives)
        assert len(trace.collectives) == 8  # two per step
        # compute: the CPU operators, off gloo's threads
        assert len(trace.compute_start_s) > 100


@pytest.mark.parametrize(("name", "kind"), [
    ("allreduce", "allreduce"), ("_allgather_base", "allgather"),
    ("allgather_into_tensor_coalesced", "allgather"),
    ("reduce_scatter_tensor_coalesced", "reducescatter"), ("all_to_all", "alltoall"),
    ("alltoall_base", "alltoall"), ("broadcast", "broadcast"), ("reduce", "reduce"),
    ("send", "sendrecv"), ("recv", "sendrecv"), ("ReduceScatter", "reducescatter"),
    ("barrier", "barrier"), ("gather", "gather")])
def test_collective_names_map_to_the_models(name, kind):
    assert kind_of(name) == kind


@pytest.mark.parametrize(("name", "word"), [
    ("Float", 4), ("BFloat16", 2), ("Half", 2), ("c10::BFloat16", 2), ("float", 4),
    ("long int", 8), ("Float8_e4m3fn", 1), ("Byte", 1), ("Double", 8), ("quaternion", None)])
def test_dtype_bytes(name, word):
    assert dtype_bytes(name) == word


@pytest.mark.parametrize(("name", "parsed"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     ("allreduce", "RING", "LL")),
    ("ncclDevKernel_AllReduce_Sum_f32_NVLS_TREE_SIMPLE", ("allreduce", "NVLS_TREE", "SIMPLE")),
    ("ncclDevKernel_AllGather_COLLNET_DIRECT_LL128", ("allgather", "COLLNET_DIRECT", "LL128")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", ("allreduce", "RING", "")),
    ("ncclDevKernel_SendRecv", ("sendrecv", "", "")),
    ("void at::native::vectorized_elementwise_kernel", None)])
def test_nccl_kernel_names(name, parsed):
    assert nccl_kernel(name) == parsed


def _events(*events: dict) -> dict:
    return {"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": list(events)}


def test_a_kernel_without_its_arguments_counts_in_time_and_is_named_in_a_warning():
    trace = parse_trace(_events(
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
         "ts": 0, "dur": 10}), file="old.json")
    (c,) = trace.collectives
    assert (c.kind, c.size_bytes, c.group_size) == ("allreduce", None, None)
    assert any("1 collective(s) without a size" in w for w in trace.warnings)
    assert any("no ProfilerStep#N" in w for w in trace.warnings)


def test_gzip_and_folders_and_rank_order(tmp_path):
    for rank in (1, 0):
        with gzip.open(tmp_path / f"r{rank}.json.gz", "wt") as f:
            json.dump({"distributedInfo": {"rank": rank}, "traceEvents": []}, f)
    (tmp_path / "notes.txt").write_text("not a trace")
    assert [t.rank for t in read_traces([tmp_path])] == [0, 1]


@pytest.mark.parametrize(("text", "match"), [
    ("{not json", r"bad\.json: not JSON"),
    ("[1, 2]", r"bad\.json: not a Chrome trace"),
    ('{"traceEvents": {}}', r"bad\.json: traceEvents: missing or not a list"),
    ('{"traceEvents": [3]}', r"bad\.json: traceEvents\[0\]: not an object"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}',
     r"bad\.json: traceEvents\[0\]\.ts: not a number: 'soon'"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1}]}',
     r"bad\.json: traceEvents\[0\]\.dur: not a number: None"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce",'
     ' "ts": 1, "dur": 2, "args": {"In msg nelems": "many", "dtype": "Float"}}]}',
     r"bad\.json: traceEvents\[0\]\.args\.In msg nelems: not a number"),
    ('{"distributedInfo": {"rank": "first"}, "traceEvents": []}',
     r"bad\.json: distributedInfo\.rank: not a number"),
])
def test_a_malformed_trace_gives_one_line_naming_the_file_and_key(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=match) as caught:
        read_trace(path)
    assert "\n" not in str(caught.value)


def test_missing_paths_broken_gzip_and_duplicate_ranks_are_refused(tmp_path):
    with pytest.raises(TraceError, match=r"nowhere\.json: no such file or folder"):
        read_traces([tmp_path / "nowhere.json"])
    with pytest.raises(TraceError, match=r"no \*\.json or \*\.json\.gz trace"):
        read_traces([tmp_path])
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}')[:12])
    with pytest.raises(TraceError, match=r"cut\.json\.gz: cannot read"):
        read_trace(tmp_path / "cut.json.gz")
    (tmp_path / "cut.json.gz").unlink()
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text('{"distributedInfo": {"rank": 3}, "traceEvents": []}')
    with pytest.raises(TraceError, match=r"b\.json: distributedInfo\.rank: rank 3 again"):
        read_traces([tmp_path])


def test_a_trace_recorded_now_with_torch_profiler_reads_back(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (pip install"
                        " 'topomodel[trace]'); the committed recording is tested above")
    import kineto_recorder

    files = kineto_recorder.record(tmp_path)
    traces = read_traces(files)
    assert [t.rank for t in traces] == [0, 1]
    for trace in traces:
        assert trace.backend == "gloo" and trace.device == "cpu"
        assert [s.number for s in trace.steps] == list(range(1, kineto_recorder.STEPS + 1))
        assert sorted({c.size_bytes for c in trace.collectives}) == [4.0, GRAD_BYTES]
        assert len(trace.collectives) == 2 * kineto_recorder.STEPS
        assert all(s.start_s < s.end_s for s in trace.steps)
    from topomodel.calibrate.tracesteps import measure_traces

    measure = measure_traces(traces)  # both ranks matched: every call has a fastest rank
    assert len(measure.steps) == 2 * kineto_recorder.STEPS
    assert {c.calls for c in measure.collectives} == {2 * kineto_recorder.STEPS}
    assert all(c.transfer_s <= c.time_s for c in measure.collectives)
    assert all(0 <= s.comm_share <= 1 and s.compute_s > 0 for s in measure.steps)


def test_a_kernel_without_arguments_takes_those_of_its_record_param_comms():
    """Older PyTorch writes the collective's arguments on the CPU op only; the kernel
    shares its ``External id``."""
    trace = parse_trace(_events(
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllGather_RING_LL_Sum_int8",
         "ts": 5, "dur": 10, "args": {"External id": 42, "stream": 13}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 0, "dur": 1,
         "args": {"External id": 42, "Collective name": "_allgather_base",
                  "dtype": "Half", "In msg nelems": 128, "Out msg nelems": 1024,
                  "Group size": 8, "Process Group Name": "2"}}))
    (c,) = trace.collectives
    assert (c.kind, c.size_bytes, c.group_size, c.group, c.stream) == (
        "allgather", 2048.0, 8, "2", "stream 13")
    assert len(trace.compute_start_s) == 0  # record_param_comms is no compute
