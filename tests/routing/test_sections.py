"""Router sections kept across copies with failed parts give each copy, bit for bit, what
routing it alone gives; the rule that decides which copies share them is exact."""

import numpy as np
import pytest
from test_routing import fabric_of, random_phase

import topomodel.routing.plane_patch as plane_patch
import topomodel.routing.sections as sections
import topomodel.routing.supernode_patch as supernode_patch
import topomodel.routing.survivors as survivors
from topomodel.fabric.failures import with_failures
from topomodel.routing import route
from topomodel.routing.sections import MARKED_FLOWS, flows_digest
from topomodel.vocabulary import FAT_TREE_TIERS, LINK_TIERS, SCALEUP_TIERS

# an NVSwitch server pod, a full mesh (MI300X), NVL72 racks and a 384-NPU supernode
# whose scale-up crosses systems through two switch levels
EXAMPLES = ["dgx-h100-superpod", "mi300x-roce", "gb200-nvl72-cluster", "cloudmatrix384"]


def one_part_per_tier(fabric):
    """(parts, cables) failing one switch of every switch tier, then one cable of every
    link tier: the copies a goodput's degraded steps route."""
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    tiers = nodes["tier"].astype(str).to_numpy()
    failures = [([str(names[tiers == t][0])], []) for t in (*SCALEUP_TIERS, *FAT_TREE_TIERS)
                if (tiers == t).any()]
    link_tiers = links["tier"].astype(str).to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    for tier in LINK_TIERS:
        rows = np.flatnonzero(link_tiers == tier)
        if len(rows):
            failures.append(([], [f"{names[src[rows[0]]]} -- {names[dst[rows[0]]]}"]))
    return failures


def routed_on_copies(fabric, phase, routing, *, alone):
    """Each copy's routed phase; ``alone``: with no section kept from another copy."""
    out = []
    for parts, cables in one_part_per_tier(fabric):
        if alone:
            fabric.derived(sections.kept_sections).clear()
        out.append(route(with_failures(fabric, parts, cables), phase, routing=routing,
                         seed=3))
    return out


def differences(shared, alone):
    return [i for i, (a, b) in enumerate(zip(shared, alone, strict=True))
            if not (np.array_equal(a.link_bytes, b.link_bytes)
                    and np.array_equal(a.hops, b.hops)
                    and np.array_equal(a.unroutable, b.unroutable))]


@pytest.fixture
def counted(monkeypatch):
    """How many times each section was routed (not taken from a kept one)."""
    counts = {"scaleup": 0, "supernode": 0, "scaleout": 0}
    for module, name, fn in ((survivors, "scaleup", "scaleup_paths"),
                             (survivors, "scaleup", "mesh_paths"),
                             (supernode_patch, "supernode", "whole_supernode"),
                             (plane_patch, "scaleout", "whole_scaleout")):
        original = getattr(module, fn)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, fn, wrapped)
    return counts


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
def test_kept_sections_give_every_copy_its_own_loads_bit_for_bit(name, routing, counted):
    fabric = fabric_of(name)
    phase = random_phase(fabric, 4000, seed=1)
    shared = routed_on_copies(fabric, phase, routing, alone=False)
    routed_shared = sum(counted.values())
    alone = routed_on_copies(fabric, phase, routing, alone=True)
    assert differences(shared, alone) == []
    # every copy routes its sections when alone; sharing spared some of them
    assert sum(counted.values()) - routed_shared > routed_shared


@pytest.mark.parametrize("example, section, tiers", [
    ("cloudmatrix384", "supernode", ("scaleup",)),
    ("dgx-h100-superpod", "scaleout", ("host",))])
def test_a_failure_does_not_take_a_kept_section_of_its_tiers(example, section, tiers,
                                                             monkeypatch):
    """Loosen the rule (a section read as if it depended on fewer tiers: the supernode
    one on the in-system arcs alone, the scale-out one on the host links alone) and the
    copies with a failure in the tiers left out take other copies' loads: the
    comparison above then fails."""
    fabric = fabric_of(example)
    phase = random_phase(fabric, 4000, seed=1)
    fabric.derived(sections.kept_sections).clear()
    monkeypatch.setitem(sections.SECTION_TIERS, section, tiers)
    loose = routed_on_copies(fabric, phase, "ecmp", alone=False)
    alone = routed_on_copies(fabric, phase, "ecmp", alone=True)
    assert differences(loose, alone)


def test_kept_sections_stay_within_their_memory(monkeypatch):
    fabric = fabric_of("cloudmatrix384")
    fabric.derived(sections.kept_sections).clear()
    monkeypatch.setattr(sections, "KEPT_SECTION_BYTES", 1)
    parts, cables = one_part_per_tier(fabric)[-1]
    for seed in range(3):
        route(with_failures(fabric, parts, cables), random_phase(fabric, 500, seed=seed))
    kept = fabric.derived(sections.kept_sections)
    assert len(kept) == 1  # the newest alone, however large
    entry = next(iter(kept.values()))
    assert not entry.values.flags.writeable


@pytest.mark.parametrize("name", ["cloudmatrix384", "dgx-h100-superpod"])
def test_a_collective_on_copies_shares_its_phases_and_gives_each_its_own_time(name,
                                                                              counted):
    """The what-ifs of one collective (a copy per part failed) build its flows once and
    route the sections a failure leaves intact once; each copy's time and loads are
    what it gets with nothing kept from another copy."""
    from topomodel.analysis.collectives.collective import run_collective
    from topomodel.analysis.training.stepshape import step_traffic

    fabric = fabric_of(name)

    def run(parts, cables):
        return run_collective(with_failures(fabric, parts, cables), "allreduce", 2**26,
                              ["all"], algorithm="ring")

    shared = [run(*failed) for failed in one_part_per_tier(fabric)]
    assert all(r.traffic.phases[0] is shared[0].traffic.phases[0] for r in shared)
    routed_shared = sum(counted.values())
    alone = []
    for failed in one_part_per_tier(fabric):
        fabric.derived(sections.kept_sections).clear()
        fabric.derived(step_traffic).clear()
        alone.append(run(*failed))
    assert [r.time_s for r in shared] == [r.time_s for r in alone]
    assert all(np.array_equal(s.timing.link_bytes, o.timing.link_bytes)
               for s, o in zip(shared, alone, strict=True))
    assert sum(counted.values()) - routed_shared > routed_shared


def test_flows_digest_names_the_flows_and_their_order():
    rng = np.random.default_rng(3)
    n = 3 * MARKED_FLOWS
    some = np.sort(rng.choice(n, MARKED_FLOWS + 5, replace=False))
    other = some.copy()
    other[7] = next(i for i in range(n) if i not in set(some.tolist()))
    other.sort()
    assert flows_digest(some, n) == flows_digest(some.copy(), n)
    assert flows_digest(some, n) != flows_digest(other, n)
    assert flows_digest(some, n) != flows_digest(some[::-1], n)  # the order counts
    assert flows_digest(some[:10], n) != flows_digest(some[:11], n)  # short: by value
    assert flows_digest(some, n) == flows_digest(some.astype(np.int32), n)


def _outputs(flows, cut):
    """A section's route: a load, then views of ``flows`` and an array of its own."""
    return lambda: (np.ones(4), flows[:0], flows[2:4], cut)


def test_a_kept_section_holds_no_view_of_its_flows():
    """A router's ``flows[:0]`` (no flow cut) kept as it is would hold the section's
    whole list of flows (its base), uncounted in its size: it is kept as its own copy,
    with the same values."""
    import gc
    import weakref

    fabric = fabric_of("dgx-h100-superpod")
    fabric.derived(sections.kept_sections).clear()
    phase = random_phase(fabric, 200, seed=1)
    flows = np.arange(150)
    held = weakref.ref(flows)
    cut = np.array([3, 7])
    entry = sections.intact_section(fabric, "scaleup", phase, flows, ("ecmp", 0, 1),
                                    _outputs(flows, cut))
    assert [r.tolist() for r in entry.rest] == [[], [2, 3], [3, 7]]
    assert entry.rest[2] is cut  # an array of its own is kept as it is
    del flows
    gc.collect()
    assert held() is None


def test_a_dense_kept_section_holds_its_span_alone_and_adds_the_same_bits():
    """A section kept dense keeps the rows of its span alone (every other row is +0.0)
    and adds, onto nothing and onto a load, what its whole array adds."""
    fabric = fabric_of("cloudmatrix384")
    fabric.derived(sections.kept_sections).clear()
    phase = random_phase(fabric, 50, seed=1)
    n = 1000
    rng = np.random.default_rng(7)
    whole = np.zeros(n)
    whole[300:700] = rng.random(400) * 1e9  # dense within its span
    whole[450] = 0.0
    kept = sections.intact_section(fabric, "supernode", phase, np.arange(5), ("ecmp", 0, 1),
                                   lambda: (whole.copy(), np.zeros(5)))
    assert kept.rows is None and kept.span == (300, 700)
    assert kept.first == 300 and len(kept.values) == 400
    assert np.array_equal(kept.added_to(None, n), whole)
    base = rng.random(n) * 1e9
    assert np.array_equal(kept.added_to(base.copy(), n), base + whole)
    # taken from the kept sections: the same entry
    again = sections.intact_section(fabric, "supernode", phase, np.arange(5), ("ecmp", 0, 1),
                                    lambda: pytest.fail("routed again"))
    assert again is kept
