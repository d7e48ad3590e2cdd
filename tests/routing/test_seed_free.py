"""The hash seed reaches routing only under ``hash``: under the even split (``ecmp``) and
d-mod-k (``dmodk``) every router (structured, the planes around failures, the general
one) gives the same loads, hops and unroutable flows, bit for bit, whatever the seed. The
scorecard runs one seed instead of :data:`~topomodel.report.review.scorecard.TAIL_SEEDS`
where the routing is one of these (:func:`~topomodel.routing.policy.seed_matters`)."""

import numpy as np
import pytest
from test_planes import failed_parts, phases, same_bits, two_supernodes
from test_routing import SMALL, fabric_of

from topomodel.analysis.reliability.goodput import with_part_failed
from topomodel.routing import route
from topomodel.routing.policy import seed_matters

SEEDS = (0, 5, 1234)
NAMES = [n for n in SMALL if n != "hgx-h100-server"]  # one server: no path to choose


def routed_bits(fabric, ph, routing, seed, router):
    r = route(fabric, ph, routing=routing, seed=seed, router=router, qps=2)
    return r.link_bytes, r.hops, r.unroutable


def copies(fabric):
    """``fabric`` intact and with a part of each kind failed (the planes' router around
    failures, which reads the seed where it hashes)."""
    return [fabric, *(with_part_failed(fabric, p) for p in failed_parts(fabric))]


@pytest.fixture(scope="module")
def fabrics(tmp_path_factory):
    return {name: fabric_of(name) for name in NAMES} | {
        "two-supernodes": two_supernodes(tmp_path_factory.getbasetemp())}


@pytest.mark.parametrize("name", [*NAMES, "two-supernodes"])
def test_seed_changes_nothing_under_ecmp_and_dmodk(fabrics, name):
    fabric = fabrics[name]
    differs = False
    for copy in copies(fabric):
        for ph in phases(copy):
            for routing in ("ecmp", "dmodk"):
                assert not seed_matters(copy, routing)
                first = routed_bits(copy, ph, routing, SEEDS[0], "auto")
                for seed in SEEDS[1:]:
                    assert same_bits(routed_bits(copy, ph, routing, seed, "auto"), first), (
                        routing, seed)
            hashed = [routed_bits(copy, ph, "hash", s, "auto")[0] for s in SEEDS]
            differs |= any(not np.array_equal(h, hashed[0]) for h in hashed[1:])
    # the oracle can fail: where flows have a choice of path, the seed moves them
    assert seed_matters(fabric, "hash")
    # one supernode: every flow stays in its scale-up domain, whose choices hash splits
    # evenly (as ECMP), so no seed moves a flow there
    assert differs == (name != "cloudmatrix384"), name


@pytest.mark.parametrize("name", ["dgx-h100-superpod", "two-supernodes"])
def test_seed_changes_nothing_on_the_general_router(fabrics, name):
    fabric = fabrics[name]
    ph = phases(fabric)[0]
    for routing in ("ecmp", "dmodk"):
        first = routed_bits(fabric, ph, routing, 0, "general")
        assert same_bits(routed_bits(fabric, ph, routing, 77, "general"), first), routing
