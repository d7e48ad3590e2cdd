"""The structured router's supernode section under ECMP a plane at a time is, bit for
bit, the one over every (flow, plane) entry."""

import numpy as np
import pytest
from test_routing import fabric_of, random_phase
from test_supernode_patch import two_supernodes

import topomodel.routing.structured as structured
from topomodel.routing import route


@pytest.mark.parametrize("name", ["cloudmatrix384", "two-supernodes"])
def test_supernode_planes_a_column_at_a_time_are_every_entry_bit_for_bit(
        name, tmp_path_factory, monkeypatch):
    fabric = (fabric_of(name) if name == "cloudmatrix384"
              else two_supernodes(tmp_path_factory.getbasetemp()))
    phase = random_phase(fabric, 4000, seed=7)
    columns = []
    original = structured._even_supernode

    def counted(*args, **kwargs):
        columns.append(True)
        return original(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(structured, "_even_supernode", counted)
        new = route(fabric, phase, routing="ecmp", seed=1)
    with monkeypatch.context() as m:
        m.setattr(structured, "_columns_apart", lambda values: False)
        every = route(fabric, phase, routing="ecmp", seed=1)
    assert columns  # the supernode section was routed a plane at a time
    assert new.link_bytes.dtype == every.link_bytes.dtype
    assert np.array_equal(new.link_bytes.view(np.uint64), every.link_bytes.view(np.uint64))
    assert np.array_equal(new.hops, every.hops)
    assert new.link_bytes.sum() > 0


def test_columns_apart():
    assert structured._columns_apart(np.array([[0, 1], [2, 3], [0, 3]]))
    assert not structured._columns_apart(np.array([[0, 1], [1, 3]]))
    assert structured._columns_apart(np.array([[-1, 1], [-1, 3]]))  # -1: none


@pytest.mark.parametrize("name", ["dual-plane-ethernet", "dgx-h100-superpod"])
@pytest.mark.parametrize("routing", ["hash", "dmodk"])
def test_scaleout_queue_pairs_in_narrow_indices_route_bit_for_bit(name, routing,
                                                                  monkeypatch):
    """The scale-out section's queue-pair indices held in the narrowest type they fit
    (``_narrowest``) give the loads and hops of the int64 indices, bit for bit."""
    fabric = fabric_of(name)
    phase = random_phase(fabric, 6000, seed=3)
    narrowed = []
    original = structured._narrowest

    def counted(values, bound):
        out = original(values, bound)
        narrowed.append(out.dtype.itemsize < values.dtype.itemsize)
        return out

    with monkeypatch.context() as m:
        m.setattr(structured, "_narrowest", counted)
        new = route(fabric, phase, routing=routing, seed=5, qps=4)
    with monkeypatch.context() as m:
        m.setattr(structured, "_narrowest", lambda values, bound: values.astype(np.int64))
        wide = route(fabric, phase, routing=routing, seed=5, qps=4)
    assert any(narrowed)  # the scale-out section ran, on narrowed indices
    assert np.array_equal(new.link_bytes.view(np.uint64), wide.link_bytes.view(np.uint64))
    assert np.array_equal(new.hops, wide.hops)
    assert np.array_equal(new.unroutable, wide.unroutable)
    assert new.link_bytes.sum() > 0


def test_narrowest_keeps_table_keys_in_range():
    table = np.arange(40_000 * 8).reshape(40_000, 8)
    slot = structured._narrowest(np.arange(40_000), table.size)
    column = structured._narrowest(np.full(40_000, 7), 8)
    assert slot.dtype == np.int32 and column.dtype == np.int8
    assert np.array_equal(slot * table.shape[1] + column, np.arange(40_000) * 8 + 7)
