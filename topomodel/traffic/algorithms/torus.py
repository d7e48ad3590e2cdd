"""Torus collectives over every dimension: the bucket algorithm, bytes per flow per step.

A group that is a whole torus (or mesh) scale-up domain runs AllReduce, AllGather and
ReduceScatter as TPU pods do, on bidirectional rings along every dimension at once
rather than on one ring. Dimensions of length 1 are left out; D is the number of the
others, N = the product of their lengths (the group's ranks).

The buffer S (nccl-tests convention, see :mod:`topomodel.traffic.collectives`) is split
into 2D parts of P = S/(2D), one per (dimension j, direction +/-). Part (j, +/-) reduces
and scatters along dimensions j, j+1, ..., j+D-1 (mod D) in that order, each a ring
reduce-scatter in its direction over the dimension's line of ranks, then gathers in the
reverse order. Stage k moves every part along its own dimension j+k, so in each stage
every dimension carries two parts, one each way: each rank sends on all 2D of its torus
links at once. In a reduce-scatter stage along a dimension of n ranks a part whose ranks
each hold H bytes takes n-1 steps of H/n per rank, leaving H/n; the all-gather stages
mirror it. Over all stages every rank sends (and receives) (N-1)/N S for AllGather and
ReduceScatter and 2(N-1)/N S for AllReduce, as a ring does, but spread over its 2D links
instead of one, so each link direction carries S (N-1)/(D N) for an AllReduce: 1/(2D) of
a single ring's 2(N-1)/N S.

Each stage is one :class:`~topomodel.traffic.phases.Phase` (a flow per rank per part);
where the parts of a stage use dimensions of different lengths, the phase repeats as
often as the longest (n-1) and each flow's bytes per step keep its total. On a mesh
(no wraparound) each ring still closes from the last rank of a line to the first, a
flow the router takes back along the line.
"""

from __future__ import annotations

import numpy as np

from topomodel.traffic.algorithms.record import Algorithm
from topomodel.traffic.communicators import GroupView, NotApplicable
from topomodel.traffic.phases import Phase

__all__ = ["TORUS", "torus_neighbors", "torus_phases"]


def torus_neighbors(coords: np.ndarray, shape: tuple[int, ...], dim: int,
                    direction: int) -> np.ndarray:
    """The flat coordinate (row-major over ``shape``) of each point's neighbour one step
    along ``dim`` in ``direction`` (+1 or -1), wrapping round the dimension.

    Examples
    --------
    >>> coords = np.array([[0, 0], [0, 3], [1, 2]])
    >>> torus_neighbors(coords, (2, 4), 1, +1).tolist()
    [1, 0, 7]
    >>> torus_neighbors(coords, (2, 4), 0, -1).tolist()
    [4, 7, 2]
    """
    step = coords.copy()
    step[..., dim] = (step[..., dim] + direction) % shape[dim]
    return np.ravel_multi_index(np.moveaxis(step, -1, 0), shape)


def torus_phases(collective: str, g: GroupView, size: float) -> list[list[Phase]]:
    """The bucket algorithm's phases for groups that are whole torus domains."""
    if collective not in ("allreduce", "allgather", "reducescatter"):
        raise NotApplicable(f"torus runs allreduce, allgather and reducescatter, not"
                              f" {collective}")
    fabric = g.fabric
    up = fabric.structure.scaleup
    if up.kind != "torus":
        raise NotApplicable(f"torus needs a torus scale-up domain; this fabric's scale-up"
                              f" is {up.kind}")
    shape = tuple(int(s) for s in up.torus.shape)
    domain = fabric.node_arrays["domain"][g.ranks]  # (groups, n)
    split = np.flatnonzero((domain != domain[:, :1]).any(axis=1))
    if len(split) or g.n != int(np.prod(shape)):
        i = int(split[0]) if len(split) else 0
        raise NotApplicable(
            f"torus needs groups that are whole torus domains of {int(np.prod(shape))}"
            f" accelerators ({'x'.join(map(str, shape))}); group {g.names[int(g.gid[i])]!r}"
            + (" spans several domains" if len(split) else f" has {g.n} ranks"))
    index = np.full(len(fabric.node_arrays), -1, np.int64)
    index[fabric.accelerators] = np.arange(fabric.accelerator_count)
    coords = up.torus.coords[index[g.ranks]]  # (groups, n, dims)
    size_of_domain = int(np.prod(shape))
    # node number at (domain, flat coordinate): the ranks' own, so no other table is needed
    node_at = np.empty((len(g.gid), size_of_domain), np.int64)
    np.put_along_axis(node_at, np.ravel_multi_index(np.moveaxis(coords, -1, 0), shape),
                      g.ranks, axis=1)
    dims = [d for d, length in enumerate(shape) if length > 1]
    count = len(dims)
    part = size / (2 * count)
    lengths = [shape[d] for d in dims]
    # held[j][k]: bytes a rank holds of part j before reduce-scatter stage k
    held = [[part / float(np.prod([lengths[(j + i) % count] for i in range(k)]))
             for k in range(count)] for j in range(count)]
    src = g.ranks.ravel()
    group = np.repeat(g.gid, g.n).astype(np.int32)
    rows = np.arange(len(g.gid))[:, None]

    def stage(k: int, *, gather: bool, label: str) -> Phase:
        """Stage k of the reduce-scatter (dimension j+k for part j) or of the all-gather
        (dimension j+D-1-k)."""
        at = [(j + (count - 1 - k if gather else k)) % count for j in range(count)]
        steps = max(lengths[a] - 1 for a in at)
        s, d, b, grp = [], [], [], []
        for j in range(count):
            n = lengths[at[j]]
            h = held[j][count - 1 - k if gather else k]
            per_step = (n - 1) * (h / n) / steps
            for direction in (+1, -1):
                flat = torus_neighbors(coords, shape, dims[at[j]], direction)
                s.append(src)
                d.append(node_at[rows, flat].ravel())
                b.append(np.full(len(src), per_step))
                grp.append(group)
        return Phase(np.concatenate(s), np.concatenate(d), np.concatenate(b),
                     np.concatenate(grp), steps, label)

    phases = []
    if collective in ("allreduce", "reducescatter"):
        phases += [stage(k, gather=False,
                         label=f"torus reduce-scatter, stage {k + 1} of {count}")
                   for k in range(count)]
    if collective in ("allreduce", "allgather"):
        phases += [stage(k, gather=True, label=f"torus allgather, stage {k + 1} of {count}")
                   for k in range(count)]
    return [phases]


def torus_rounds(collective: str, ranks: int, nodes: int, torus_shape: tuple[int, ...]) -> int:
    """A ring step per chip along every dimension, both halves for AllReduce."""
    return sum(d - 1 for d in torus_shape) * (2 if collective == "allreduce" else 1)


TORUS = Algorithm(
    "torus", ("allreduce", "allgather", "reducescatter"),
    note="torus: the bucket algorithm, S in 2D parts, each a ring reduce-scatter along"
                 " every dimension in turn then the all-gather in reverse, staggered so every"
                 " dimension carries a part each way in every stage",
    help="bucket algorithm on torus domains", nccl_intra="ring", nccl_inter="ring",
    generate=torus_phases, rounds=torus_rounds,
    applies=lambda fabric: fabric.structure.scaleup.kind == "torus")
