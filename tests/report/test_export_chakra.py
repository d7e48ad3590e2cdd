"""The Chakra export: one modelled step as a trace per rank, read back with protobuf and
held to the step's own traffic, schedule and dependencies."""

import itertools
import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from conftest import EXAMPLES

pytest.importorskip("google.protobuf")

from topomodel import limits
from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import stage_buckets
from topomodel.analysis.training.compute import device_model
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.model import BYTES
from topomodel.analysis.training.step import param_gather_calls, step_ops, step_time
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import shape_of
from topomodel.cli import main
from topomodel.errors import UsageError
from topomodel.export.chakra import GRID_OF_CALL, SCHEMA, chakra_trace, write_chakra
from topomodel.export.protoschema import file_descriptor, messages, read_delimited
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout, rank_groups

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
        nodes.append({"id": n.id, "name": n.name, "type": n.type, "deps": list(n.data_deps),
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


# --- every rank of every stage against the step --------------------------------------


def stage_traffic(fabric, model, layout, a):
    """Per stage, bytes per rank of each call name the step issues: its passes'
    collectives (``step_ops``), ZeRO-1/2 weight gathers and gradient buckets, from the
    step model's public per-stage figures."""
    shape = shape_of(fabric, model, layout)
    calls, _ = step_calls(fabric, model, layout, a, shape=shape)
    device = device_model(shape.accelerator, a.compute_dtype, override=a.compute_efficiency,
                          hbm_efficiency=a.hbm_efficiency)
    sched, sizes, moe = shape.schedule, shape.sizes, shape.moe_sizes
    ops = step_ops(device, model, layout, a, shape.seq, sched, calls, sizes - moe, moe)
    dense, experts = stage_parameters(model, layout, sizes.sum(axis=1), moe.sum(axis=1))
    name_of = {(c.kind, c.collective): n for n, c in calls.items()}
    out = [Counter() for _ in range(sched.p)]
    for key, count in ops.calls.items():
        for s, row in enumerate(count):
            out[s][name_of[key]] += sum(round(float(c)) for c in row)
    for key, count in param_gather_calls(calls, layout, a, dense, experts).items():
        for s, c in enumerate(count):
            out[s][key] += int(c)
    for s, runs in enumerate(stage_buckets(sched, calls, layout, a, dense, experts, sizes,
                                           moe)):
        for key, count, _ in runs:
            out[s][key] += count
    return calls, dense, [{k: v * round(calls[k].size_bytes) for k, v in c.items() if v}
                          for c in out]


def pg_kind(name):
    return name.rstrip("0123456789")


def test_every_rank_of_a_pp4_step_sums_to_the_steps_traffic(tmp_path):
    a = StepAssumptions(compute_efficiency=0.5)
    fabric, model, layout, _ = job("small-16x8-a100-100gbe-roce", "llama3-8b", tp=4, pp=4,
                                   dp=8, zero=1)
    step, ranks = check(tmp_path, fabric, model, layout, a)
    trace = chakra_trace(fabric, model, layout, a)
    calls, dense, per_stage = stage_traffic(fabric, model, layout, a)
    groups = json.loads((tmp_path / "t" / "workload.json").read_text())
    ranks_list = np.arange(layout.world)
    for name, members in groups.items():  # the step's communicators, as its layout has them
        assert members in rank_groups(ranks_list, layout, pg_kind(name)).tolist()
    kind_of = {(GRID_OF_CALL[n], c.collective): n for n, c in calls.items() if n != "pp"}
    by_group = defaultdict(lambda: defaultdict(list))
    total, expected = Counter(), Counter()
    for rank, nodes in ranks.items():
        stage = int(trace.stage_of_rank[rank])
        expected.update(per_stage[stage])
        for n in nodes:
            if n["type"] == 7:
                assert rank in groups[n["pg_name"]]
                name = kind_of[(pg_kind(n["pg_name"]), TYPES[n["comm_type"]])]
                total[name] += n["comm_size"]
                by_group[n["pg_name"]][rank].append((n["comm_type"], n["comm_size"]))
            elif n["type"] == 5:
                total["pp"] += n["comm_size"]
    # every member of a group issues the same collectives in the same order (or the
    # simulator would wait for a missing one)
    for name, members in by_group.items():
        assert sorted(members) == groups[name]
        assert len({tuple(seq) for seq in members.values()}) == 1
    # PP point-to-point: each pipeline crosses p - 1 boundaries, each way, per microbatch
    pp = next(c for c in step.comm if c.kind == "pp")
    sched = shape_of(fabric, model, layout).schedule
    assert pp.calls == 2 * sched.m  # an interior stage sends a forward and a backward
    assert total.pop("pp") == (layout.world // layout.pp) * (layout.pp - 1) * 2 * sched.m \
        * round(pp.size_bytes)
    assert total == expected  # every collective of every stage, summed over all ranks
    # the stage the step reports: its ranks carry exactly the step's traffic
    slow = [r for r in ranks if trace.stage_of_rank[r] == step.slowest_stage]
    assert sizes_by_collective(ranks[slow[0]]) == step_sizes(step)
    # the gradient buckets of one pipeline cover the model's gradients (per TP shard)
    # with less than one bucket left over per stage
    grad = BYTES[a.grad_dtype] * float(dense.sum())
    buckets = sum(stage.get("dp", 0) for stage in per_stage)
    assert grad <= buckets < grad + layout.pp * round(calls["dp"].size_bytes)


def one_f_one_b(p, m, s):
    """The 1F1B order of stage ``s`` (Megatron-LM's ``forward_backward_pipelining``
    without interleaving): p - s - 1 warm-up forwards, then one forward and one
    backward at a time, then the remaining backwards."""
    warm = min(p - s - 1, m)
    order = [f"F{i}" for i in range(warm)]
    for i in range(m - warm):
        order += [f"F{warm + i}", f"B{i}"]
    return order + [f"B{i}" for i in range(m - warm, m)]


def test_pp4_dependencies_follow_1f1b_and_never_deadlock(tmp_path):
    import networkx as nx

    fabric, model, layout, a = job("small-16x8-a100-100gbe-roce", "llama3-8b",
                                   StepAssumptions(compute_efficiency=0.5), tp=8, pp=4)
    _, ranks = check(tmp_path, fabric, model, layout, a)
    trace = chakra_trace(fabric, model, layout, a)
    sched = shape_of(fabric, model, layout).schedule
    graph = nx.DiGraph()
    sends, recvs = {}, {}
    for rank, nodes in ranks.items():
        for n in nodes:
            graph.add_node((rank, n["id"]))
            graph.add_edges_from(((rank, d), (rank, n["id"])) for d in n["deps"])
            key = (n.get("comm_src"), n.get("comm_dst"), n.get("comm_tag"))
            if n["type"] == 5:
                sends[key] = (rank, n["id"])
            elif n["type"] == 6:
                recvs[key] = (rank, n["id"])
    assert sends.keys() == recvs.keys()
    graph.add_edges_from((sends[k], recvs[k]) for k in sends)  # a receive waits for its send
    # the whole step, every rank and transfer, can run: no cycle through the pipeline
    assert nx.is_directed_acyclic_graph(graph)
    for rank, nodes in ranks.items():
        s = int(trace.stage_of_rank[rank])
        comp = [n for n in nodes if n["type"] == 4][:-1]  # the passes, not the optimizer
        assert [n["name"].split(".")[0] for n in comp] == one_f_one_b(layout.pp, sched.m, s)
        for before, after in itertools.pairwise(comp):  # one pass at a time
            assert nx.has_path(graph, (rank, before["id"]), (rank, after["id"]))
        for n in comp:  # a pass waits for its input from the neighbouring stage's pass
            kind, micro = n["name"][0], n["name"].split(".")[0][1:]
            peer = s - 1 if kind == "F" else s + 1
            if not 0 <= peer < layout.pp:
                continue
            pipe = trace.pp_groups[np.flatnonzero((trace.pp_groups == rank).any(axis=1))[0]]
            source = next(m for m in ranks[int(pipe[peer])]
                          if m["type"] == 4 and m["name"].split(".")[0] == kind + micro)
            assert nx.has_path(graph, (int(pipe[peer]), source["id"]), (rank, n["id"]))
