"""The supernode section patched from the intact one is, bit for bit, the section routed
whole on the copy; the rule that refuses a patch is needed."""

import functools

import numpy as np
import pytest
from conftest import patched_and_whole_routes
from test_routing import fabric_of, random_phase

import topomodel.routing.clos.paths as paths
import topomodel.routing.sections as sections
import topomodel.routing.supernode_patch as patch
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.routing import route
from topomodel.routing.clos.live import survivors_view
from topomodel.routing.general import route_general
from topomodel.traffic.phases import Phase
from topomodel.vocabulary import SCALE_OUT_TIERS

# two 96-system supernodes with three switch levels (14 Clos components: 7 planes
# each), joined by a two-plane fat-tree
TWO_SUPERNODES = ("system: cloudmatrix384-node\nsystems: 192\nscaleup:\n  kind: supernode\n"
                  "  switch: ub-l2\n  uplinks: 16\n  systems_per_domain: 96\n"
                  "scaleout:\n  kind: fat_tree\n  switch: tomahawk5\n  planes: 2\n"
                  "  port_rate: \"200 Gb/s /dir\"\n")


@functools.cache
def two_supernodes(tmp_dir):
    path = tmp_dir / "sn.yaml"
    path.write_text(TWO_SUPERNODES)
    return build_fabric(*load_design(path))


@pytest.fixture
def fabrics(tmp_path_factory):
    return {"cloudmatrix384": fabric_of("cloudmatrix384"),
            "two-supernodes": two_supernodes(tmp_path_factory.getbasetemp())}


def supernode_failures(fabric):
    """One switch of each upper level (first and last), one link of each of the
    supernode's link tiers, and an accelerator's link to a chip."""
    nodes, links = fabric.nodes, fabric.links
    names = nodes["name"].to_numpy()
    tiers = nodes["tier"].astype(str).to_numpy()
    out = []
    for tier in ("scaleup_l2", "scaleup_l3"):
        members = names[tiers == tier]
        out += [([str(m)], []) for m in members[[0, -1]]] if len(members) else []
    link_tiers = links["tier"].astype(str).to_numpy()
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    for tier in ("scaleup", "scaleup_l2", "scaleup_l3"):
        rows = np.flatnonzero(link_tiers == tier)
        if len(rows):
            out.append(([], [f"{names[src[rows[-1]]]} -- {names[dst[rows[-1]]]}"]))
    return out


def patched_and_whole(fabric, failures, phase, routing, monkeypatch, **options):
    """Each copy's routed phase with the patch, then with every section routed whole;
    and how many supernode sections were patched."""
    patched, whole, applied = patched_and_whole_routes(
        monkeypatch, patch, "patched_supernode", fabric, failures,
        lambda f: route(with_failures(fabric, *f), phase, routing=routing, seed=2, **options))
    return patched, whole, sum(applied)


def same(a, b):
    return (np.array_equal(a.link_bytes, b.link_bytes) and np.array_equal(a.hops, b.hops)
            and np.array_equal(a.unroutable, b.unroutable))


@pytest.mark.parametrize("name", ["cloudmatrix384", "two-supernodes"])
@pytest.mark.parametrize(("routing", "options"), [("ecmp", {}), ("hash", {}),
                                                  ("dmodk", {}),
                                                  ("hash", {"hash_scaleup": True})])
def test_patched_supernode_section_is_the_whole_one_bit_for_bit(
        fabrics, name, routing, options, monkeypatch):
    fabric = fabrics[name]
    fabric.derived(sections.kept_sections).clear()
    failures = supernode_failures(fabric)
    phase = random_phase(fabric, 3000, seed=4)
    patched, whole, applied = patched_and_whole(fabric, failures, phase, routing,
                                                monkeypatch, **options)
    for f, a, b in zip(failures, patched, whole, strict=True):
        assert same(a, b), f
    assert applied >= len(failures) - 2  # patched, not routed whole, nearly everywhere


def test_a_flow_whose_planes_change_is_routed_whole(fabrics, monkeypatch):
    """Cut one chip off its level-2 switches: flows from its system lose that plane and
    move their share onto the others. The patch refuses it; forced to accept (the plane
    check dropped), it gives other loads than routing the section whole. (Two
    supernodes: in one, every flow would touch the failed component, and its route on
    the copy would be the whole section's.)"""
    fabric = fabrics["two-supernodes"]
    names = fabric.nodes["name"].to_numpy()
    links = fabric.links
    chip = fabric.node_number(str(names[0]).split("/")[0] + "/sw0")
    up = np.flatnonzero((links["src"].to_numpy() == chip)
                        & (links["tier"] == "scaleup_l2").to_numpy())
    cut = ([], [f"{names[chip]} -- {names[links['dst'].iat[r]]}" for r in up])
    phase = random_phase(fabric, 3000, seed=4)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, [cut], phase, "ecmp", monkeypatch)
    assert applied == 0 and same(patched[0], whole[0])
    fabric.derived(sections.kept_sections).clear()
    monkeypatch.setattr(patch, "_same_planes", lambda copy, intact: True)
    patched, whole, applied = patched_and_whole(fabric, [cut], phase, "ecmp", monkeypatch)
    assert applied == 1 and not same(patched[0], whole[0])


def test_too_many_failed_components_route_whole(fabrics, monkeypatch):
    fabric = fabrics["cloudmatrix384"]
    l2 = fabric.nodes["name"][(fabric.nodes["tier"] == "scaleup_l2").to_numpy()]
    planes = sorted({name.split("/")[0] for name in l2})
    one_per_plane = [next(n for n in l2 if n.startswith(p + "/")) for p in planes]
    phase = random_phase(fabric, 1000, seed=5)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, [(one_per_plane, [])], phase, "ecmp",
                                                monkeypatch)
    assert applied == 0 and same(patched[0], whole[0])


def _views_routed(monkeypatch):
    """A list that notes, for each route of a supernode section from now on, whether it
    ran on the intact view ("intact") or on a copy with parts failed ("copy")."""
    routed = []
    original = patch.supernode_plane_paths

    def noted(view, *args, **kwargs):
        routed.append("intact" if view.alive.all() else "copy")
        return original(view, *args, **kwargs)

    monkeypatch.setattr(patch, "supernode_plane_paths", noted)
    return routed


def test_a_patch_routes_its_flows_intact_only_once(fabrics, monkeypatch):
    """The intact section keeps each flow's planes: a patched copy compares its touched
    flows' planes with them, so across every copy the section is routed with every arc
    live once (the kept section), not again for each copy's touched flows."""
    fabric = fabrics["two-supernodes"]
    fabric.derived(sections.kept_sections).clear()
    phase = random_phase(fabric, 3000, seed=4)
    routed = _views_routed(monkeypatch)
    failures = supernode_failures(fabric)
    patched, whole, applied = patched_and_whole(fabric, failures, phase, "ecmp", monkeypatch)
    assert applied >= len(failures) - 2
    assert all(same(a, b) for a, b in zip(patched, whole, strict=True))
    # the patched copies: one intact route; the copies routed whole after it (the
    # kept sections cleared before each) route none intact
    assert routed.count("intact") == 1


def test_a_patch_touching_every_flow_routes_the_copy_once(fabrics, monkeypatch):
    """Every level-3 switch of plane 0 failed in both supernodes: every flow between
    systems has a chip in plane 0, so the patch's flows are the whole section's; its
    route is returned (the flows crossing pods lose plane 0, which refused the patch
    and routed the copy a second time before), the same as routed whole."""
    fabric = fabrics["two-supernodes"]
    names = fabric.nodes["name"].to_numpy()
    failed = [str(n) for n in names if "/plane0/scaleup_l3_" in str(n)]
    phase = random_phase(fabric, 3000, seed=4)
    copy_routes = []
    original = patch.supernode_plane_paths

    def counted(view, *args, **kwargs):
        copy_routes.extend([] if view.alive.all() else [True])
        return original(view, *args, **kwargs)

    monkeypatch.setattr(patch, "supernode_plane_paths", counted)
    fabric.derived(sections.kept_sections).clear()
    patched, whole, applied = patched_and_whole(fabric, [(failed, [])], phase, "ecmp",
                                                monkeypatch)
    assert applied == 1 and same(patched[0], whole[0])
    assert len(copy_routes) == 2  # once patched (all flows), once whole
    assert patched[0].hops.max() > 0


@pytest.mark.parametrize("routing", ["ecmp", "hash", "dmodk"])
def test_leaf_pairs_per_system_pair_are_those_of_every_flow_bit_for_bit(
        fabrics, routing, monkeypatch):
    """The supernode section with its leaf pairs found per pair of systems (every arc to
    a chip live) is, bit for bit, the section found over every (flow, plane) entry (the
    general path, forced by finding no systems); intact, with each supernode tier's part
    failed, and with an accelerator - chip link failed (the general path itself)."""
    fabric = fabrics["two-supernodes"]
    phase = random_phase(fabric, 3000, seed=4)
    grouped = []  # per section: whether routed per system pair
    original, original_even = paths.route_planes, paths.even_by_group

    def recorded(*args, **kwargs):
        grouped.append(kwargs.get("groups") is not None)
        return original(*args, **kwargs)

    def recorded_even(*args, **kwargs):  # ECMP: the planes' bytes a column at a time
        out = original_even(*args, **kwargs)
        grouped.extend([True] if out is not None else [])
        return out

    for failure in [([], []), *supernode_failures(fabric)]:
        view = survivors_view(with_failures(fabric, *failure))
        clos = view.clos
        far = np.flatnonzero((clos.domain[phase.src] == clos.domain[phase.dst])
                             & (clos.domain[phase.src] >= 0)
                             & (clos.system[phase.src] != clos.system[phase.dst]))
        with monkeypatch.context() as m:
            m.setattr(paths, "route_planes", recorded)
            m.setattr(paths, "even_by_group", recorded_even)
            new = paths.supernode_plane_paths(view, phase, far, routing, 5, 2)
        with monkeypatch.context() as m:
            m.setattr(paths, "_systems", lambda *args: None)
            general = paths.supernode_plane_paths(view, phase, far, routing, 5, 2)
        for a, b in zip(new, general, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(f"u{a.dtype.itemsize}"),
                                  b.view(f"u{b.dtype.itemsize}")), failure
    # per system pair intact and on the level-2/3 failures; an accelerator's link to
    # a chip failed takes the general path
    assert len(grouped) == 1 + len(supernode_failures(fabric))
    assert grouped[0] and sum(grouped) == len(grouped) - 1


def test_a_patch_routes_the_intact_section_before_the_copy(fabrics, monkeypatch):
    """Where the intact section is not kept yet, it is routed before the copy's touched
    flows, so that its route does not hold theirs too (a goodput's peak memory)."""
    fabric = fabrics["two-supernodes"]
    fabric.derived(sections.kept_sections).clear()
    phase = random_phase(fabric, 3000, seed=4)
    order = _views_routed(monkeypatch)
    patched, whole, applied = patched_and_whole(fabric, supernode_failures(fabric)[:1],
                                                phase, "ecmp", monkeypatch)
    assert applied == 1
    assert all(same(a, b) for a, b in zip(patched, whole, strict=True))
    assert order[:2] == ["intact", "copy"]


@pytest.mark.parametrize("routing", ["ecmp", "hash"])
@pytest.mark.parametrize("failed", [False, True])
def test_supernode_paths_with_int32_rows_are_those_with_int64_bit_for_bit(
        fabrics, monkeypatch, routing, failed):
    """The flows' fan-out table rows gathered in int32 (the even route by system pairs,
    and the general route where an arc is cut) give what int64 rows give."""
    fabric = fabrics["two-supernodes"]
    if failed:
        fabric = with_failures(fabric, *supernode_failures(fabric)[-1])
    view = survivors_view(fabric)
    phase = random_phase(fabric, 3000, seed=5)
    clos = view.clos
    far = np.flatnonzero((clos.domain[phase.src] == clos.domain[phase.dst])
                         & (clos.system[phase.src] != clos.system[phase.dst]))
    assert len(far)
    narrow = paths.supernode_plane_paths(view, phase, far, routing, 1, 2)
    monkeypatch.setattr(paths, "_narrow", lambda table: table)
    wide = paths.supernode_plane_paths(view, phase, far, routing, 1, 2)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype
               for a, b in zip(narrow, wide, strict=True))


def test_int8_supernode_hops_are_the_routed_hops(fabrics):
    """The supernode section's hops, kept as int8 (``SUPERNODE_HOPS_DTYPE``; compared
    with the replaced int64 code in ``test_planes``), are the hops the router around
    failures gives those flows on every supernode failure, the section kept or not."""
    fabric = fabrics["two-supernodes"]
    fabric.derived(sections.kept_sections).clear()
    phase = random_phase(fabric, 3000, seed=6)
    for failures in supernode_failures(fabric):
        copy = with_failures(fabric, *failures)
        view = survivors_view(copy)
        clos = view.clos
        far = np.flatnonzero((clos.domain[phase.src] == clos.domain[phase.dst])
                             & (clos.system[phase.src] != clos.system[phase.dst]))
        _, hops, lost, _ = paths.supernode_plane_paths(view, phase, far, "ecmp", 2, 1)
        assert len(far) and hops.dtype == paths.SUPERNODE_HOPS_DTYPE
        routed = route(copy, phase, routing="hash", seed=2)
        assert np.array_equal(routed.hops[far[~lost]], hops[~lost]), failures


@pytest.mark.parametrize(("routing", "options"), [("ecmp", {}), ("hash", {}), ("dmodk", {}),
                                                  ("hash", {"hash_scaleup": True})])
def test_the_router_around_failures_is_the_general_router_on_every_supernode_failure(
        fabrics, routing, options):
    """On the two three-level supernodes, intact and with each supernode failure (switch
    and link kinds), the router around failures gives the general router's loads, hops
    and unroutable flows. Among the flows are some between systems of one supernode
    whose NICs share a leaf: 4 hops through the leaf against 6 across the supernode's
    levels; both routers keep them on the supernode (the general router did not before
    a host link cost ``HOST_LINK_COST`` more: those flows took the leaf)."""
    from test_survivors import assert_same_routes

    fabric = fabrics["two-supernodes"]
    phase = random_phase(fabric, 600, seed=4)
    clos = survivors_view(fabric).clos
    across = np.flatnonzero((clos.domain[phase.src] == clos.domain[phase.dst])
                            & (clos.system[phase.src] != clos.system[phase.dst]))
    leaf_of = _leaves_of_accelerators(fabric)
    shared = across[(leaf_of[phase.src[across]] & leaf_of[phase.dst[across]]).any(axis=1)]
    on_leaf = Phase(phase.src[shared], phase.dst[shared], phase.bytes[shared],
                    phase.group[shared], phase.steps, phase.label, phase.messages_per_step)
    scale_out = fabric.links["tier"].isin(SCALE_OUT_TIERS).to_numpy()
    for failures in [([], []), *supernode_failures(fabric)]:
        copy = with_failures(fabric, *failures)
        routed = assert_same_routes(copy, phase, routing, **options)
        assert np.count_nonzero(routed.hops[shared] == 6) >= 10, failures
        alone = route_general(copy, on_leaf, routing=routing, seed=5, **options)
        assert not alone.link_bytes[scale_out].any() and not len(alone.unroutable)


def _leaves_of_accelerators(fabric):
    """(accelerators' nodes, leaves) whether an accelerator's NIC has an arc to a leaf."""
    links, nodes = fabric.links, fabric.nodes
    src, dst = links["src"].to_numpy(), links["dst"].to_numpy()
    tier = links["tier"].astype(str).to_numpy()
    leaves = np.flatnonzero((nodes["tier"] == "leaf").to_numpy())
    column = np.full(len(nodes), -1)
    column[leaves] = np.arange(len(leaves))
    nic_leaf = np.zeros((len(nodes), len(leaves)), bool)
    up = np.flatnonzero(tier == "leaf")
    up = up[column[dst[up]] >= 0]
    nic_leaf[src[up], column[dst[up]]] = True
    host = np.flatnonzero(tier == "host")
    host = host[fabric.kind_mask("accelerator")[src[host]]]
    out = np.zeros_like(nic_leaf)
    out[src[host]] = nic_leaf[dst[host]]
    return out


def test_packed_planes_compare_as_the_planes_themselves():
    """The planes used, packed a bit per plane (``supernode_plane_paths``), are equal
    exactly where the (flows, planes) booleans are."""
    rng = np.random.default_rng(2)
    for planes in (1, 7, 8, 9):
        usable = rng.random((500, planes)) < 0.8
        other = usable.copy()
        assert patch._same_planes(np.packbits(usable, axis=1), np.packbits(other, axis=1))
        other[rng.integers(0, 500), rng.integers(0, planes)] ^= True
        assert not patch._same_planes(np.packbits(usable, axis=1),
                                      np.packbits(other, axis=1))
