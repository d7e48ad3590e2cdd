"""Limits on the work one input may ask for, checked before anything is allocated.

A typo (``systems: 1000000000``, a range step of ``1e-9``), a hostile file (a YAML
"billion laughs" of nested aliases) or a huge all-to-all would otherwise run for hours
or exhaust memory before failing. Every limit is a named constant here, with the reason
for its value; ``docs/limits.md`` lists them for users. Each is several times what the
largest shipped example needs, so no real design comes near one. A refused count says
what it would have cost (:func:`too_many`).

Memory figures per item were measured on the shipped examples (peak resident memory
of the CLI, less its ~150 MiB start-up) and rounded up.
"""

from __future__ import annotations

MAX_YAML_CHARACTERS = 1 << 20
"""Largest YAML document read, in characters (1 Mi). The built-in catalogs are 100 kB
together and the largest 28 kB; reading a 1 MiB document takes about 3 s."""

MAX_YAML_NODES = 100_000
"""Most YAML nodes (mappings, lists, scalars) one document may expand to, counting a
node each time an alias repeats it: 85 x the largest built-in catalog (1,176 nodes). It
stops alias expansion ("billion laughs": a few lines that expand to 10^9 nodes) and
catalogs of hundreds of thousands of entries before they are built."""

MAX_YAML_DEPTH = 64
"""Deepest nesting of mappings and lists in a YAML document; the built-in files nest at
most 6 deep."""

MAX_ACCELERATORS = 1 << 19
"""Most accelerators a fabric may have (524,288): 4 x the 131,072 the model is built
to handle in seconds."""

BYTES_PER_ACCELERATOR = 10_000
"""Peak memory of building a fabric, per accelerator, bytes: 9.7 kB measured on the
densest example (98,304 accelerators on 4k-port supernodes, 6.5 M links), 3.4 kB on an
8-GPU-server fat-tree."""

MAX_NICS_PER_SYSTEM = 1024
"""Most scale-out NICs per system (an NVL72 rack has 72)."""

MAX_SCALEUP_LINKS = 1 << 23
"""Most in-system scale-up links (accelerator to switch chip, or accelerator pairs of a
full mesh) a fabric may have: 8.4 M, 12 x the 688,128 of the largest example (12,288
servers of 8 NPUs and 7 switch chips)."""

BYTES_PER_LINK = 500
"""Peak memory of building a fabric per link, bytes (the link table, cable assignment
and failure marking; 380 B measured on the 6.5 M-link supernode example)."""

MAX_PLANES = 64
"""Most scale-out planes (rails of their own switches); published designs use 1-8."""

MAX_FLOWS = 1 << 24
"""Most flows one All-to-All may list (16.8 M: a direct All-to-All of 4,096 ranks; n
ranks have n(n - 1)). A pairwise one is refused up front. A direct one under even ECMP
on a structured fabric without failures is routed from counts without listing its pairs
(0.03 s, 150 MiB at 4,096 ranks; 3.4 s and 470 MiB over all 98,304 ranks of the 100k
example), so it is refused only where its pairs would be listed: hash or d-mod-k
routing, failures and the general router (about 10 s and 4 GiB at this limit)."""

BYTES_PER_FLOW = 400
"""Peak memory per routed flow, bytes: 280 B measured for a 1,016-rank All-to-All
under ECMP, 140 B for 4,096 ranks; under hash routing over two RoCE planes, where
every queue pair is hashed and the planes picked pair by pair, 335 B (a direct
All-to-All on an 8,192-NPU cut of the 98k NPU servers, from 0.5 to 2.1 M flows: the
peak's slope) and 390 B (all 1,024 GPUs of dual-plane-ethernet.yaml without PXN,
1.05 M flows, above a run of the same fabric with 8-rank groups): the largest,
rounded up (benchmarks/README.md, card43)."""

DEFAULT_MAX_SWEEP_POINTS = 100_000
"""Most points a sweep runs unless ``--max-points`` raises it: at about 2 points/s per
core (benchmarks/README.md), half a day on a 2-core machine."""

BYTES_PER_SWEEP_POINT = 1_000
"""Memory per sweep point, bytes: 425 B measured for an expanded point and its key (a
128,000-point sweep file), and about as much again for its result row (estimated)."""

MAX_CONSTRAINT_CHARACTERS = 1000
"""Longest sweep constraint expression, in characters (the shipped ones are under 40)."""

MAX_CONSTRAINT_DEPTH = 32
"""Deepest nesting of a sweep constraint's expression (operators inside operators)."""

MAX_SEQUENCE_TOKENS = 1 << 24
"""Longest sequence a step may train on, tokens (16.8 M; long-context runs use 1 M)."""

MAX_STEP_TOKENS = 1 << 36
"""Most tokens in one step's global batch (6.9e10: 4,096 x Llama 3's 16 M)."""

MAX_SCALE_POINTS = 32
"""Most accelerator counts one scaling curve builds and models."""

MAX_MICROBATCHES = 1 << 16
"""Most microbatches per pipeline in one step (65,536); Llama 3 405B's 16M-token batch
on 8k sequences is 2,048 sequences in all."""

MAX_PIPELINE_CHUNKS = 1 << 21
"""Most forward and backward chunks one step's pipeline timeline may hold, stages x
virtual stages x microbatches (2 Mi: about 30 s and 0.6 GB measured)."""

MAX_GRADIENT_BUCKETS = 1 << 20
"""Most gradient buckets one pipeline stage may reduce in a step (1 Mi: 1 TB of
gradients in 1 MB buckets; Megatron's default 40 MB buckets make a few hundred), each a
collective timed on the step's timeline."""

BYTES_PER_GRADIENT_BUCKET = 48
"""Memory per gradient bucket of the step's gradient tail, bytes: counted, not measured
(its ready time and cost, 8 B each, their concatenated copies and the sort's order)."""

BYTES_PER_PIPELINE_CHUNK = 300
"""Memory per chunk of the pipeline timeline, bytes (290 B measured)."""


MAX_TRACE_RANKS = 1 << 14
"""Most ranks a Chakra trace export writes (16,384), one file each: about 1.8 GB of
files at :data:`BYTES_PER_TRACE_RANK`, and a directory of 16k files; a 100k-accelerator
step would be ten times that, for a trace whose stages are alike anyway."""

BYTES_PER_TRACE_RANK = 110_000
"""Size of one rank's Chakra trace file, bytes: 106 kB measured for Llama 3 8B at TP 8
on the HGX H100 server (1,305 nodes, 81 B each); it grows with the layers and
microbatches of a stage."""


def format_bytes(size_bytes: float) -> str:
    """A memory size in binary units, for messages.

    Examples
    --------
    >>> format_bytes(3 * 2**30), format_bytes(500e6), format_bytes(2e18)
    ('3 GiB', '477 MiB', '1.73 EiB')
    """
    for factor, unit in ((2**60, "EiB"), (2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"),
                         (2**20, "MiB"), (2**10, "KiB")):
        if size_bytes >= factor:
            return f"{size_bytes / factor:.3g} {unit}"
    return f"{size_bytes:.0f} B"


def format_count(count: float) -> str:
    """A count for messages: digits with separators, or a power of ten when huge.

    Examples
    --------
    >>> format_count(1234567), format_count(2**64), format_count(float("inf"))
    ('1,234,567', '1.8e+19', 'infinitely many')
    """
    if count != count or count in (float("inf"), float("-inf")):
        return "infinitely many"
    if abs(count) < 1e12:
        return f"{int(count):,}"
    return f"{float(count):.2g}"


def above(count: float, name: str, what: str, bytes_each: float | None = None, *,
          doing: str = "to build") -> str | None:
    """The refusal of ``count`` ``what`` above the limit this module names ``name``
    (:func:`too_many`, then the limit's name, so a reader can find and argue with it), or
    None within the limit: the one check of a count against a limit.

    Examples
    --------
    >>> above(3, "MAX_PLANES", "planes") is None
    True
    >>> above(10**6, "MAX_PLANES", "planes")
    '1,000,000 planes is more than the limit of 64 (topomodel.limits.MAX_PLANES)'
    """
    limit = globals()[name]
    if count <= limit:
        return None
    return (too_many(count, limit, what, bytes_each, doing=doing)
            + f" (topomodel.limits.{name})")


def too_many(count: float, limit: int, what: str, bytes_each: float | None = None, *,
             doing: str = "to build") -> str:
    """The message for ``count`` ``what`` above ``limit``, with the memory they would take
    ``doing`` what they are for.

    Examples
    --------
    >>> too_many(10**9, MAX_ACCELERATORS, "accelerators", BYTES_PER_ACCELERATOR)
    '1,000,000,000 accelerators (about 9.09 TiB to build) is more than the limit of 524,288'
    """
    cost = "" if bytes_each is None else (
        f" (about {format_bytes(float(count) * bytes_each)} {doing})")
    return f"{format_count(count)} {what}{cost} is more than the limit of {limit:,}"
