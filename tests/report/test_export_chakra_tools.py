"""The Chakra export against Chakra itself: our schema field by field against the
published ``et_def.proto`` (tests/data/chakra, its source in the README there), and our
files read with Chakra's own reader (``protolib.decodeMessage`` and the
``chakra_jsonizer`` tool) where MLCommons Chakra is installed (``pip install --no-deps
mlc-chakra``: its reader needs only protobuf)."""

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_export_chakra import TYPES, job, read_trace

pytest.importorskip("google.protobuf")

from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.step import step_time
from topomodel.analysis.training.stepshape import shape_of
from topomodel.export.chakra import SCHEMA, chakra_trace, write_chakra
from topomodel.export.protoschema import file_descriptor

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "chakra" / "et_def.proto"


def shape(fd):
    """Every message's fields (name, number, label, type, type name, oneof) and every
    enum's values, from a FileDescriptorProto."""
    messages = {m.name: [(f.name, f.number, f.label, f.type, f.type_name,
                          m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index")
                          else None) for f in m.field] for m in fd.message_type}
    enums = {e.name: [(v.name, v.number) for v in e.value] for e in fd.enum_type}
    return fd.package, messages, enums


def test_our_schema_is_the_published_one_field_by_field():
    ours = shape(file_descriptor(SCHEMA.read_text(), "et_def.proto"))
    published = shape(file_descriptor(PUBLISHED.read_text(), "et_def.proto"))
    assert ours == published
    package, messages, enums = published
    assert package == "ChakraProtoMsg" and {"GlobalMetadata", "Node"} <= set(messages)
    assert ("COMM_COLL_NODE", 7) in enums["NodeType"]


def test_a_changed_field_number_is_caught():
    text = PUBLISHED.read_text().replace("uint64 duration_micros = 7;",
                                         "uint64 duration_micros = 11;")
    assert shape(file_descriptor(text, "et_def.proto")) != shape(
        file_descriptor(SCHEMA.read_text(), "et_def.proto"))


# --- read by Chakra's own code --------------------------------------------------------


@pytest.fixture(scope="module")
def chakra():
    protolib = pytest.importorskip(
        "chakra.src.third_party.utils.protolib",
        reason="MLCommons Chakra is not installed (pip install --no-deps mlc-chakra)")
    from chakra.schema.protobuf import et_def_pb2
    from chakra.src.jsonizer import jsonizer
    return protolib, et_def_pb2, jsonizer


def chakra_read(chakra, path):
    """(metadata, nodes) of one file, read as Chakra's tools read it."""
    protolib, pb, _ = chakra
    stream = protolib.openFileRd(str(path))
    meta = pb.GlobalMetadata()
    assert protolib.decodeMessage(stream, meta)
    nodes = []
    while True:
        node = pb.Node()
        if not protolib.decodeMessage(stream, node):
            break
        nodes.append(node)
    stream.close()
    return meta, nodes


def attrs(node):
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


@pytest.mark.parametrize(("example", "layout"), [
    ("small-16x8-a100-100gbe-roce", {"tp": 4, "pp": 4, "dp": 8}),
    ("hgx-h100-server", {"tp": 8}),
])
def test_chakras_reader_reads_our_trace(chakra, tmp_path, example, layout):
    _, pb, _ = chakra
    fabric, model, lay, a = job(example, "llama3-8b", StepAssumptions(compute_efficiency=0.5),
                                **layout)
    trace = chakra_trace(fabric, model, lay, a)
    write_chakra(trace, tmp_path)
    step = step_time(fabric, model, lay, a)
    sched = shape_of(fabric, model, lay).schedule
    pp = next((c for c in step.comm if c.collective == "sendrecv"), None)
    tp = Counter()
    for c in step.comm:
        if c.kind == "tp":
            tp[c.collective] += round(c.size_bytes) * c.calls
    sends = Counter()
    for rank in range(lay.world):
        meta, nodes = chakra_read(chakra, tmp_path / f"workload.{rank}.et")
        assert meta.version == "1.0.0"
        # Chakra reads what our own protobuf reader reads, node for node
        _, ours = read_trace(tmp_path, rank)
        assert [(n.id, n.type, list(n.data_deps), n.duration_micros, attrs(n))
                for n in nodes] == [(n["id"], n["type"], n["deps"], n["duration_us"],
                                     {k: v for k, v in n.items() if k not in
                                      ("id", "type", "deps", "duration_us", "name")})
                                    for n in ours]
        types = Counter(pb.NodeType.Name(n.type) for n in nodes)
        assert set(types) <= {"COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE",
                              "COMM_RECV_NODE"}
        assert types["COMP_NODE"] == sched.ops + 1  # every pass, then the optimizer
        coll = Counter()
        for n in nodes:
            at = attrs(n)
            if n.type == pb.COMM_COLL_NODE and at["pg_name"].startswith("tp"):
                coll[TYPES[at["comm_type"]]] += at["comm_size"]
            elif n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                assert at["comm_size"] == round(pp.size_bytes)
                sends[pb.NodeType.Name(n.type)] += 1
        if trace.stage_of_rank[rank] == step.slowest_stage:  # the stage the step reports
            assert coll == tp
    if lay.pp > 1:  # every send has its receive; the first and last stages send half
        assert sends["COMM_SEND_NODE"] == sends["COMM_RECV_NODE"]
        assert sends["COMM_SEND_NODE"] == lay.world // lay.pp * (lay.pp - 1) * pp.calls


def test_chakra_jsonizer_converts_our_file(chakra, tmp_path, monkeypatch):
    _, _, jsonizer = chakra
    fabric, model, lay, a = job("hgx-h100-server", "llama3-8b", tp=8)
    write_chakra(chakra_trace(fabric, model, lay, a), tmp_path)
    out = tmp_path / "rank0.json"
    monkeypatch.setattr(sys, "argv", ["chakra_jsonizer", "--input_filename",
                                      str(tmp_path / "workload.0.et"),
                                      "--output_filename", str(out)])
    jsonizer.main()
    text, decoder, docs = out.read_text(), json.JSONDecoder(), []
    pos = 0
    while pos < len(text):  # the tool writes one JSON object per message, back to back
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    assert docs[0]["version"] == "1.0.0"
    _, nodes = chakra_read(chakra, tmp_path / "workload.0.et")
    assert len(docs) == 1 + len(nodes)
    assert {d["type"] for d in docs[1:]} == {"COMP_NODE", "COMM_COLL_NODE"}
