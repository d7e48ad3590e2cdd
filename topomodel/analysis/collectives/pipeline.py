"""NCCL's pipeline fill: the time a collective's first chunk takes to reach the steady
state, which NCCL's tuner (and so :mod:`topomodel.analysis.collectives.protocols`)
leaves out.

NCCL's tuner times a collective as its latency constant plus size / rate. The kernel
moves the data in chunks through a pipeline; where the pipeline has several stages that
each handle a whole chunk before passing it on, the stages idle until the first chunk
has passed through them (fill) and after the last has left the first (drain). With
``D`` stages and a unit of ``u`` bytes per loop of every channel, a collective of ``S``
bytes takes ``(S / u + D - 1)`` units' time at the steady rate, so beyond size / rate::

    fill = (D - 1) x min(u, S) / S x bandwidth time

(one loop when the collective is smaller than one: ``u`` is then ``S``). The fill is a
share of the bandwidth time, so a calibration that fits a link's efficiency moves it
with the rate.

Where it applies (read from the kernels of NVIDIA/nccl 5067397c, NCCL 2.30.7, and
v2.18.5-1, the version of the Azure curve; the same structure and figures in both):

- NVLS AllReduce inside one node (``RunWorkColl<ncclFuncAllReduce, ..., NCCL_ALGO_NVLS,
  NCCL_PROTO_SIMPLE>`` in ``src/device/all_reduce.h``, ``work->oneNode``): three groups
  of warps, scatter (each rank writes a chunk to every head's buffer), reduce (each
  head reduces its chunk through the NVSwitch with ``multimem`` loads and multicasts
  it back) and gather (each rank copies the heads' results out); each hands a whole
  loop of ``nHeads x chunkSize`` bytes per channel to the next through NCCL's FIFO, so
  ``D`` = 3 (:data:`NVLS_STAGES`), ``u`` = channels x heads x chunk
  (:func:`nvls_loop_bytes`).
- Not the ring: every rank sends its own chunk at step 0 and forwards a slice as soon as
  it has it (two slices per chunk, ``ALLREDUCE_SLICESTEPS``), so every link is busy from
  the start and the ring has no fill beyond NCCL's per-hop latency (which its latency
  constant holds). Not modelled: the tree, NVLS-Tree and CollNet across nodes, whose
  pipelines also have several stages (their fill is left out, as before).

Examples
--------
>>> loop = nvls_loop_bytes(2**30, ranks=8, architecture="hopper")
>>> loop == 16 * 8 * 128 * 1024   # 16 channels x 8 heads x 128 KiB
True
>>> round(fill_share("nvls", "allreduce", 2**30, ranks=8, nodes=1,
...                  architecture="hopper"), 4)   # 2 x 16 MiB / 1 GiB
0.0312
>>> fill_share("ring", "allreduce", 2**30, ranks=8, nodes=1, architecture="hopper")
0.0
"""

from __future__ import annotations

from topomodel.inputs.records import documented
from topomodel.traffic.algorithms.innetwork import NVLS_MAX_HEADS

NVLS_STAGES = documented(
    "pipeline.NVLS_STAGES", 3,
    """Stages of NCCL's NVLS AllReduce inside one node that each handle a whole loop
    before the next can start on it: scatter, reduce-and-multicast, gather (three
    groups of warps of one channel's block, ``src/device/all_reduce.h``, NVIDIA/nccl
    5067397c and v2.18.5-1). The first loop passes two of them before the last stage
    starts, and the last loop two after the first has finished.""")

NVLS_CHANNELS = documented(
    "pipeline.NVLS_CHANNELS", {"hopper": 16, "blackwell": 24},
    """NCCL's NVLS channels (CUDA blocks) inside one node by architecture:
    ``NVLS_NCHANNELS_SM90`` 16 and, for one node, ``NVLS_NCHANNELS_SM100_NVL`` 24
    (``src/transport/nvls.cc``, NVIDIA/nccl 5067397c; v2.18.5-1 has 16 for every
    architecture, ``NCCL_NVLS_NCHANNELS``). Other architectures (no NVLS in NCCL) use
    Hopper's.""")

NVLS_CHUNK_BYTES = documented(
    "pipeline.NVLS_CHUNK_BYTES", 128 * 1024,
    """NCCL's NVLS chunk, bytes (``NCCL_NVLS_CHUNKSIZE`` default 128 KiB,
    ``src/transport/nvls.cc``; v2.18.5-1 hard-codes the same 131072 in
    ``src/enqueue.cc``), before the size rule of :func:`nvls_chunk_bytes` shrinks it.""")

def nvls_chunk_bytes(size_bytes: float, channels: int, heads: int) -> int:
    """NCCL's NVLS chunk for an AllReduce of ``size_bytes``, bytes: 128 KiB, halved to
    64 KiB below 64 loops of it, 32 KiB below 8 loops and 16 KiB below 2 (a loop being
    channels x heads x chunk), as ``calcCollChunking`` in ``src/enqueue.cc`` (NVIDIA/nccl
    5067397c; the same rule in v2.18.5-1's ``computeColl``).

    >>> [nvls_chunk_bytes(s, 16, 8) // 1024 for s in (2**30, 2**29, 2**25, 2**22)]
    [128, 64, 32, 16]
    """
    chunk = NVLS_CHUNK_BYTES
    ops = channels * heads
    for loops, smaller in ((64, 65536), (8, 32768), (2, 16384)):
        if size_bytes < loops * ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_loop_bytes(size_bytes: float, *, ranks: int, architecture: str) -> int:
    """Bytes of one loop of NCCL's NVLS AllReduce over all its channels, inside one node:
    channels x heads x chunk (:data:`NVLS_CHANNELS`, one head per rank up to
    :data:`~topomodel.traffic.algorithms.innetwork.NVLS_MAX_HEADS`, :func:`nvls_chunk_bytes`)."""
    channels = NVLS_CHANNELS.get(architecture, NVLS_CHANNELS["hopper"])
    heads = min(ranks, NVLS_MAX_HEADS)
    return channels * heads * nvls_chunk_bytes(size_bytes, channels, heads)


def fill_share(nccl_algorithm: str, collective: str, size_bytes: float, *, ranks: int,
               nodes: int, architecture: str) -> float:
    """The pipeline fill and drain of one collective as a share of its bandwidth time
    (0-2): (stages - 1) x one loop's bytes / the size, the loop no larger than the
    size; 0 where NCCL's algorithm (``nvls``, ``ring``, ...: :func:`~topomodel.analysis.
    collectives.protocols.nccl_algorithm`) has no fill or it is not modelled (module
    docstring)."""
    if nccl_algorithm != "nvls" or collective != "allreduce" or nodes > 1 or size_bytes <= 0:
        return 0.0
    loop = nvls_loop_bytes(size_bytes, ranks=ranks, architecture=architecture)
    return (NVLS_STAGES - 1) * min(loop, size_bytes) / size_bytes
