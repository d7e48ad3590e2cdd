"""The Chakra export: one modelled step as a trace per rank, read back with protobuf and
held to the step's own traffic, schedule and dependencies."""

from collections import Counter, defaultdict

import pytest
from conftest import EXAMPLES

pytest.importorskip("google.protobuf")

from topomodel import limits
from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.step import step_calls, step_time
from topomodel.analysis.training.stepshape import shape_of
from topomodel.cli import main
from topomodel.errors import UsageError
from topomodel.export.chakra import GRID_OF_CALL, SCHEMA, chakra_trace, write_chakra
from topomodel.export.protoschema import file_descriptor, messages, read_delimited
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout

TYPES = {0: "allreduce", 2: "allgather", 6: "alltoall", 7: "reducescatter"}


def read_trace(folder, rank):
    """(metadata, nodes) of one rank's file, each node as a dict with its attributes."""
    m = messages(str(SCHEMA))
    raw = list(read_delimited((folder / f"workload.{rank}.et").read_bytes()))
    meta = m["GlobalMetadata"].FromString(raw[0])
    nodes = []
    for blob in raw[1:]:
        n = m["Node"].FromString(blob)
        attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in n.attr}
        nodes.append({"id": n.id, "type": n.type, "deps": list(n.data_deps),
                      "duration_us": n.duration_micros, **attrs})
    return meta, nodes


def job(example, model, assumptions=None, **layout):
    design, catalog = load_design(EXAMPLES / f"{example}.yaml")
    fabric = build_fabric(design, catalog)
    return fabric, catalog.get(model, Model), Layout(**layout), assumptions or StepAssumptions()


def check(tmp_path, fabric, model, layout, a):
    """Write the trace, read every file back and hold it to the step."""
    trace = chakra_trace(fabric, model, layout, a)
    files = write_chakra(trace, tmp_path / "t")
    assert len(files) == layout.world + 1
    step = step_time(fabric, model, layout, a)
    sched = shape_of(fabric, model, layout).schedule
    per_rank = {}
    for rank in range(layout.world):
        meta, nodes = read_trace(tmp_path / "t", rank)
        assert meta.version == "1.0.0"
        ids = [n["id"] for n in nodes]
        assert ids == list(range(len(nodes)))
        # acyclic: every dependency is on an earlier node of the same file
        assert all(d < n["id"] for n in nodes for d in n["deps"])
        comp = [n for n in nodes if n["type"] == 4]
        assert len(comp) == sched.ops + 1  # every operation of the stage, then the optimizer
        assert all(n["duration_us"] > 0 for n in comp)
        per_rank[rank] = nodes
    return step, per_rank


def sizes_by_collective(nodes):
    out = Counter()
    for n in nodes:
        if n["type"] == 7:
            out[TYPES[n["comm_type"]]] += n["comm_size"]
    return out


def step_sizes(step):
    out = Counter()
    for c in step.comm:
        if c.collective != "sendrecv":
            out[c.collective] += round(c.size_bytes) * c.calls
    return out


def test_hgx_h100_trace_carries_the_steps_collectives(tmp_path):
    fabric, model, layout, a = job("hgx-h100-server", "llama3-8b", tp=8)
    step, ranks = check(tmp_path, fabric, model, layout, a)
    assert step_sizes(step)  # TP gathers and scatters
    for nodes in ranks.values():
        assert sizes_by_collective(nodes) == step_sizes(step)
        assert {n["pg_name"] for n in nodes if n["type"] == 7} == {"tp0"}


def test_multi_node_data_parallel_trace(tmp_path):
    fabric, model, layout, a = job("small-16x8-a100-100gbe-roce", "llama3-8b",
                                   StepAssumptions(compute_efficiency=0.5), tp=8, dp=16)
    step, ranks = check(tmp_path, fabric, model, layout, a)
    assert any(c.kind == "dp" for c in step.comm)  # the gradient buckets over DP
    groups = (tmp_path / "t" / "workload.json").read_text()
    assert '"grad0"' in groups and '"tp15"' in groups
    for nodes in ranks.values():
        assert sizes_by_collective(nodes) == step_sizes(step)


def test_pipeline_sends_match_the_step_and_pair_up(tmp_path):
    fabric, model, layout, a = job("small-16x8-a100-100gbe-roce", "llama3-8b",
                                   StepAssumptions(compute_efficiency=0.5), tp=8, pp=4)
    step, ranks = check(tmp_path, fabric, model, layout, a)
    pp = next(c for c in step.comm if c.kind == "pp" and c.collective == "sendrecv")
    sends, recvs = defaultdict(list), defaultdict(list)
    for rank, nodes in ranks.items():
        for n in nodes:
            if n["type"] in (5, 6):
                assert n["comm_size"] == round(pp.size_bytes)
                side = sends if n["type"] == 5 else recvs
                side[(n["comm_src"], n["comm_dst"], n["comm_tag"])].append(rank)
    assert sorted(sends) == sorted(recvs)  # every send has its receive, same tag
    assert all(len(v) == 1 for v in [*sends.values(), *recvs.values()])
    interior = [r for r in ranks if 0 < r // 8 % 4 < 3 or r % 4 in (1, 2)]
    counts = Counter(k[0] for k in sends)
    # an interior stage sends a forward and a backward per microbatch: the step's count
    assert pp.calls in {counts[r] for r in interior}


def test_every_step_collective_has_a_communicator():
    fabric, model, layout, a = job("small-16x8-a100-100gbe-roce", "llama3-8b",
                                   StepAssumptions(compute_efficiency=0.5), tp=8, pp=2,
                                   zero=1, dp=8)
    calls, _ = step_calls(fabric, model, layout, a)
    assert set(calls) - {"pp"} <= set(GRID_OF_CALL)


def test_schema_matches_chakras_definition():
    fd = file_descriptor(SCHEMA.read_text(), "et_def.proto")
    node = next(m for m in fd.message_type if m.name == "Node")
    assert [(f.name, f.number) for f in node.field] == [
        ("id", 1), ("name", 2), ("type", 3), ("ctrl_deps", 4), ("data_deps", 5),
        ("start_time_micros", 6), ("duration_micros", 7), ("inputs", 8), ("outputs", 9),
        ("attr", 10)]
    attr = next(m for m in fd.message_type if m.name == "AttributeProto")
    assert len(attr.field) == 32 and attr.field[-1].name == "bytes_list"
    with pytest.raises(UsageError, match=r"x.proto:1: cannot read 'service'"):
        file_descriptor("service Foo {}", "x.proto")


def test_too_many_ranks_refused(monkeypatch):
    fabric, model, layout, a = job("hgx-h100-server", "llama3-8b", tp=8)
    monkeypatch.setattr(limits, "MAX_TRACE_RANKS", 4)
    with pytest.raises(UsageError, match=r"8 trace files .* limit of 4 .*MAX_TRACE_RANKS"):
        chakra_trace(fabric, model, layout, a)


def test_cli_writes_the_trace_and_refuses_without_model(tmp_path, capsys):
    design = str(EXAMPLES / "hgx-h100-server.yaml")
    assert main(["export", design, "--to", "chakra", "-o", str(tmp_path / "x")]) == 2
    assert "--to chakra needs --model" in capsys.readouterr().err
    assert main(["export", design, "--to", "chakra", "--model", "llama3-8b", "--tp", "8",
                 "-o", str(tmp_path / "y")]) == 0
    assert len(list((tmp_path / "y").glob("workload.*.et"))) == 8
