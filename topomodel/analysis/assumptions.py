"""The named assumptions of the time, step, goodput and cost models
(:class:`TimeModel`, :class:`StepAssumptions`, :class:`GoodputAssumptions`,
:class:`CostAssumptions`), each with a default and a reason, apart from the models
that use them: the CLI, the sweep parameters and the review read their defaults and
texts without importing the models (and numpy, pandas, scipy). The thresholds of
check-nccl and advise live here too, for their CLI help."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from topomodel.analysis.collectives.protocols import PROTOCOLS
from topomodel.analysis.training.model import BYTES
from topomodel.errors import UsageError
from topomodel.inputs.records import (
    Invalid,
    Reader,
    Reading,
    boolean,
    check_fields,
    choice,
    documented,
    integer,
    mapping_of,
    number,
    quantity,
    spec,
)
from topomodel.inputs.yamlsource import KeyPath
from topomodel.vocabulary import LINK_TIERS

PER_MESSAGE_OVERHEAD_S = 5e-6
"""Software cost of one message per step (kernel launch, proxy, doorbell), seconds.
Assumed, of the order NCCL's small-message latencies show (a few microseconds); a
named parameter, not a measured figure."""

JITTER_CV = documented(
    "step.JITTER_CV", 0.015,
    """Per-rank compute time, coefficient of variation. Sinha et al., "Not All GPUs Are
    Created Equal" (SC22, arXiv 2208.11035) ran the same kernels on over 90 % of the
    GPUs of five clusters (Summit, Vortex, Frontera, Longhorn: V100; Corona: MI60) and
    found identical GPUs 8 % apart in performance on average (22 % at most), from
    manufacturing variation under power management, with outliers up to 1.5x slower
    than the median GPU. Read as the spread of a box plot's whiskers, which lie 2.7
    standard deviations either side of a normal population's median (Tukey's 1.5 IQR
    rule), 8 % is a standard deviation of 8 % / 5.4 = 1.5 % (derived: the paper's exact
    definition of variation was not retrieved; read as +-2 sigma it would be 2 %). No
    H100 or newer measurement of the same kind was found. A synchronous step runs at the
    pace of its slowest rank, so the wait grows with the ranks (syncwait.py).""")

STRAGGLERS_DEFAULT = documented(
    "step.STRAGGLERS_DEFAULT", 0.0,
    """No slow machines beyond the jitter by default (straggler share 0): the step time
    is that of a job on healthy machines, as the large published runs aim to keep it:
    Llama 3 (arXiv 2407.21783, section 3.3.4) and MegaScale (NSDI'24) describe tools
    built to find slow ranks so they can be fixed or removed, and FALCON (Wu et al.,
    arXiv 2410.12588) finds fail-slows lasting from tens of seconds to about ten hours
    on a 10,000-GPU cluster, delaying large jobs by 1.34x on average: events a goodput
    estimate counts, not a property of every step. --straggler-share and
    --straggler-slowdown model them as a what-if (a step waits whenever one of its
    ranks is slow).""")

DEFAULT_HOP_LATENCY_S = 500e-9
"""Latency of a switch with no catalog figure, seconds (assumed; the same default as the
builder's switch latency)."""

DEFAULT_SHORTFALL = documented(
    "measured.DEFAULT_SHORTFALL", 0.20,
    """A size is flagged when its measured busbw is below the model's by more than this
    share. The model is held to published nccl-tests results within 10 %
    (tests/integration/test_nccl_validation.py) and nccl-tests runs vary by a few per cent from run
    to run; 20 % is beyond both, so a flag points at the system, not at noise.""")

COLUMNS = ("best", "out-of-place", "in-place")
"""Which measured column is compared: the better of the two (default: in-place and
out-of-place move the same bytes, and the better shows what the system can do), or one."""

DEFAULT_COMM_THRESHOLD = documented(
    "advice.DEFAULT_COMM_THRESHOLD", 0.30,
    """Communication is called the bottleneck when exposed communication and wait are
    more than this share of the step: beyond it a third of every step's time (and of the
    accelerators' cost) goes to waiting on the network, the point where practitioners
    usually change the parallel layout or the fabric. A rule of thumb, not a law: give
    --threshold to use your own.""")


def _tier_fractions(reading: Reading, path: KeyPath, value: Any) -> dict[str, float]:
    """Effective / nominal rate per link tier, each in (0, 1]; may be empty."""
    if isinstance(value, dict) and not value:
        return {}
    return dict(mapping_of(LINK_TIERS, number(0, 1, low_open=True))(reading, path, value))


@dataclass(frozen=True)
class TimeModel:
    """Assumptions of the time model, each a named parameter with a default and reason;
    checked on creation."""

    per_message_overhead_s: float = spec(
        quantity("time"), default=PER_MESSAGE_OVERHEAD_S, check=number(0),
        doc="software cost of one message per step (kernel launch, proxy, doorbell),"
        " seconds; assumed, of the order of NCCL's small-message latencies")
    hop_latency_s: float = spec(
        quantity("time"), default=DEFAULT_HOP_LATENCY_S, check=number(0),
        doc="latency of a switch with no catalog figure, seconds (assumed; the builder's"
        " default switch latency)")
    efficiency: dict[str, float] = spec(
        _tier_fractions, default={}, doc="effective / nominal rate of a link tier, 0-1"
        " (default: the catalog's link efficiency, or the network's packet efficiency)")
    pxn: bool = spec(boolean, default=True,
                     doc="PXN: cross-rail traffic first crosses the scale-up domain to the"
                     " GPU on the destination's rail, as NCCL does by default"
                     " (NCCL_PXN_DISABLE=0); off: it crosses the network's upper tiers")
    protocol: str = spec(choice("auto", *PROTOCOLS), default="auto",
                         doc="collective protocol: auto (the fastest, as NCCL's tuner"
                         " picks), or LL, LL128 or Simple (as NCCL_PROTO forces)")
    measured_curves: bool = spec(
        boolean, default=True,
        doc="time a collective inside one system from the system's measured nccl-tests"
        " curve where the catalog has one for its collective, group size and size"
        " (NCCL's tuner model, which the model follows, overestimates the mid-size"
        " bandwidth measured on 8 x A100: docs/validation.md); off: the model alone."
        " A forced protocol or scale-up efficiency turns it off")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)


_DTYPE = choice(*BYTES)
_SHARE = number(0, 1, low_open=True)


def _optional_share(reading: Reading, path: KeyPath, value: Any) -> float | None:
    return None if value is None else _SHARE(reading, path, value)


def _time_model(_: Reading, __: KeyPath, value: Any) -> TimeModel:
    if not isinstance(value, TimeModel):
        raise Invalid(f"expected a TimeModel, got {type(value).__name__}")
    return value


def _optional(read: Reader) -> Reader:
    """``None`` (the default rule applies) or a value ``read`` accepts."""

    def check(reading: Reading, path: KeyPath, value: Any) -> Any:
        return None if value is None else read(reading, path, value)

    check.kind = getattr(read, "kind", None)  # type: ignore[attr-defined]  # as read's
    return check


@dataclass(frozen=True)
class StepAssumptions:
    """Named assumptions of the step model, each with its default and reason (the
    field's ``doc``); checked on creation. How the run is done (schedule, recompute,
    overlap mechanisms, ZeRO stage) is the :class:`~topomodel.traffic.layout.Layout`'s.

    Examples
    --------
    >>> StepAssumptions().compute_efficiency is None  # the measured curve, not a constant
    True
    >>> StepAssumptions(compute_efficiency=5)
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: StepAssumptions.compute_efficiency: must be in (0, 1], got 5
    """

    compute_efficiency: float | None = spec(
        _optional_share, default=None,
        doc="override: one flat achieved/peak efficiency for every GEMM instead of the"
        " accelerator's measured size curve (a what-if; none by default)")
    hbm_efficiency: float | None = spec(
        _optional_share, default=None,
        doc="override: achieved/peak HBM bandwidth for memory-bound ops instead of the"
        " catalog's measured rate (default: measured, else 0.83)")
    compute_dtype: str = spec(_DTYPE, default="bf16", doc="precision of the matmuls")
    activation_dtype: str = spec(_DTYPE, default="bf16", doc="precision of activations"
                                 " sent between ranks")
    grad_dtype: str = spec(_DTYPE, default="fp32", doc="gradient communication precision"
                           " (Megatron-LM reduces the gradient buffer in its own precision:"
                           " fp32 for bf16 training unless --grad-reduce-in-bf16)")
    main_grad_dtype: str = spec(_DTYPE, default="fp32", doc="precision of the gradient"
                                " buffer gradients accumulate in (Megatron-LM's fp32 main"
                                " grads: 18 bytes per parameter with Adam, as Korthikanti"
                                " et al. 2022, Figure 1 shows)")
    dp_bucket_bytes: float | None = spec(
        _optional(quantity("size")), default=None, check=_optional(number(0, low_open=True)),
        doc="DP gradient bucket, bytes (default: Megatron-Core's rule, max(40M, 1M x the"
        " ranks that reduce it) parameters, in the gradient precision; one bucket when"
        " the reduction is not overlapped; see gradient_bucket_bytes)")
    jitter_cv: float = spec(number(0, 10), default=JITTER_CV, doc="per-rank compute time,"
                            " coefficient of variation; the step waits for the slowest"
                            " of its ranks (default: measured per-GPU variation of"
                            " identical GPUs, step.JITTER_CV)")
    hot_expert_factor: float = spec(number(1, 1000), default=1.1, doc="busiest expert's load /"
                                    " mean in an MoE layer (assumed)")
    straggler_share: float = spec(number(0, 1), default=STRAGGLERS_DEFAULT,
                                  doc="share of accelerators that run slow, beyond the"
                                  " jitter (none by default: step.STRAGGLERS_DEFAULT)")
    straggler_slowdown: float = spec(number(0, 100), default=0.0, doc="a slow accelerator's"
                                     " extra compute time (0.5: 50 % slower, the worst"
                                     " outliers Sinha et al. SC22 measured)")
    optimizer_bytes_per_param: float = spec(number(0, 1000), default=12.0, doc="optimizer state,"
                                            " bytes per parameter (Adam: fp32 master, m, v)")
    comm_sm_share: float = spec(number(0, 1, low_open=False), default=20 / 132,
                                doc="share of the SMs communication kernels take while"
                                " they run beside compute, which slows that compute"
                                " (DeepSeek-V3: 20 of the H800's 132 SMs for its"
                                " all-to-alls, arXiv 2412.19437 section 3.2.2)")
    time: TimeModel = spec(_time_model, default=TimeModel(), doc="the collective time model")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)


BUCKET_MIN_PARAMS = 40_000_000
"""Parameters in a default gradient bucket at the least (Megatron-Core,
megatron/core/distributed/distributed_data_parallel.py: ``bucket_size = max(40000000,
1000000 * dp_group.size())``)."""

BUCKET_PARAMS_PER_RANK = 1_000_000
"""Parameters a default bucket grows by per rank of its reduction, "to ensure that
chunks used in NCCL ring-reduce implementations are large enough to remain
bandwidth-bound rather than latency-bound" (the same file, Megatron-LM d98e8a6)."""


def gradient_bucket_bytes(a: StepAssumptions, ranks: int, grad_bytes: float, *,
                          overlapped: bool = True) -> float:
    """Bytes of one gradient bucket reduced over ``ranks`` ranks: ``a.dp_bucket_bytes``
    where given, else Megatron-Core's default of max(:data:`BUCKET_MIN_PARAMS`,
    :data:`BUCKET_PARAMS_PER_RANK` x ``ranks``) parameters of ``grad_bytes`` each, or
    everything in one bucket when the reduction is not ``overlapped`` (Megatron-Core
    sets the bucket size to infinity without ``overlap_grad_reduce``).

    Examples
    --------
    >>> gradient_bucket_bytes(StepAssumptions(), 8, 4) / 1e6  # 40M fp32 parameters
    160.0
    >>> gradient_bucket_bytes(StepAssumptions(), 4096, 2) / 1e9  # 4.096G bf16 ones
    8.192
    >>> gradient_bucket_bytes(StepAssumptions(dp_bucket_bytes=25e6), 4096, 2) / 1e6
    25.0
    """
    if a.dp_bucket_bytes is not None:
        return a.dp_bucket_bytes
    if not overlapped:
        return math.inf
    return max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_RANK * ranks) * grad_bytes


SECONDS_PER_DAY = 86_400.0


STORAGE_MAX_BPS = 2e12
"""Most checkpoint write rate the default rule gives, bytes/s: Llama 3's Tectonic
"supports a sustainable throughput of 2 TB/s" (Llama 3 paper, arXiv 2407.21783, §3.3.1),
the largest sustained figure published for a training cluster's checkpoint storage; the
rule does not extrapolate past it."""


LLAMA3_GPUS = 16_384
"""GPUs of Llama 3 405B's pre-training, which that storage served (arXiv 2407.21783,
§3.3.1: "up to 16K H100 GPUs")."""


STORAGE_BPS_PER_ACCELERATOR = STORAGE_MAX_BPS / LLAMA3_GPUS
"""Checkpoint write rate per accelerator, bytes/s: 2 TB/s over 16,384 GPUs, about
122 MB/s. A job's storage is taken to scale with it (a 2-server lab cluster does not have
Tectonic), up to :data:`STORAGE_MAX_BPS`."""


def job_storage_Bps(assumptions: GoodputAssumptions, accelerators: int) -> float:
    """The job's checkpoint write rate, bytes/s: ``assumptions.storage_Bps`` when given,
    else ``storage_Bps_per_accelerator`` x ``accelerators``, at most
    :data:`STORAGE_MAX_BPS`.

    Examples
    --------
    >>> job_storage_Bps(GoodputAssumptions(), 16)  # 16 GPUs: about 1.95 GB/s
    1953125000.0
    >>> job_storage_Bps(GoodputAssumptions(), 98_304)
    2000000000000.0
    >>> job_storage_Bps(GoodputAssumptions(storage_Bps=5e9), 98_304)
    5000000000.0
    """
    if assumptions.storage_Bps is not None:
        return assumptions.storage_Bps
    return min(STORAGE_MAX_BPS, assumptions.storage_Bps_per_accelerator * accelerators)




@dataclass(frozen=True)
class GoodputAssumptions:
    """Named assumptions of the goodput model (assumed unless the doc names a source);
    checked on creation."""

    checkpoint_bytes: float | None = spec(
        _optional(quantity("size")), default=None, check=_optional(number(0, low_open=True)),
        doc="checkpoint size, bytes (default: parameters x checkpoint_bytes_per_param)")
    checkpoint_bytes_per_param: float = spec(
        number(0, low_open=True), default=14.0,
        doc="checkpoint bytes per parameter: bf16 weights 2 + fp32 master, Adam m, v 12")
    storage_Bps: float | None = spec(
        _optional(quantity("rate")), default=None, check=_optional(number(0, low_open=True)),
        doc="aggregate checkpoint write rate, bytes/s (default: 122 MB/s per accelerator of"
        " the job, Llama 3's Tectonic's 2 TB/s over its 16,384 GPUs, at most 2 TB/s:"
        " job_storage_Bps)")
    storage_Bps_per_accelerator: float = spec(
        quantity("rate"), default=STORAGE_BPS_PER_ACCELERATOR,
        check=number(0, low_open=True),
        doc="checkpoint write rate per accelerator of the job, bytes/s: Llama 3's Tectonic"
        " sustains 2 TB/s for up to 16,384 GPUs, 122 MB/s each")
    detection_s: float = spec(
        quantity("time"), default=120.0, check=number(0),
        doc="time to notice a failure, s (assumed: health checks and time-outs)")
    restart_s: float = spec(
        quantity("time"), default=480.0, check=number(0),
        doc="time to restart from a checkpoint, s (assumed: with detection, Meta's"
        " reported 10-minute stall)")
    repair_s: float = spec(
        quantity("time"), default=SECONDS_PER_DAY, check=number(0),
        doc="time a failed system is out of the pool, s (assumed: back in a day)")
    network_repair_s: float = spec(
        quantity("time"), default=4 * 3600.0, check=number(0),
        doc="time to swap a failed switch or optic, s (assumed: 4 h)")
    spare_systems: int | None = spec(
        _optional(integer(0)), default=None,
        doc="hot spare systems (default: spare_fraction of the job's systems, rounded up)")
    spare_fraction: float = spec(number(0, 1), default=0.02,
                                 doc="hot spares kept beside a large job, share (assumed)")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)


@dataclass(frozen=True)
class CostAssumptions:
    """Named assumptions of the running cost (:mod:`topomodel.analysis.cost`), each with
    its source or reason (docs/cost.md); checked on creation."""

    pue: float = spec(
        number(1, 5), default=1.3,
        doc="power usage effectiveness, facility power / IT power: Uptime Institute's"
        " 2024 survey finds new and large facilities at 1.3 or better (industry average"
        " 1.56, held up by older sites)")
    electricity_USD_per_kWh: float = spec(
        number(0), default=0.0806,
        doc="electricity price, US dollars per kWh: the US industrial average of 2023,"
        " 8.06 cents (EIA, via Statista, March 2024)")
    facility_USD_per_kW: float = spec(
        number(0), default=11_000.0,
        doc="facility capex per kW of IT power, US dollars: the middle of the US$10-12M"
        " per MW average construction cost (data-center construction guides, 2024-26;"
        " docs/cost.md)")
    amortisation_years: float = spec(
        number(0, low_open=True), default=5.0,
        doc="years the IT equipment is paid off over: Amazon shortened a subset of its"
        " servers and network gear to 5 years (2025; Microsoft and Alphabet use 6)")
    facility_years: float = spec(
        number(0, low_open=True), default=15.0,
        doc="years the facility is paid off over (assumed: the life of its power and"
        " cooling plant)")
    cost_of_capital: float = spec(
        number(0, 1), default=0.08,
        doc="annual cost of capital, a share (assumed: a typical data-center operator's"
        " weighted average cost of capital)")

    def __post_init__(self) -> None:
        check_fields(self, UsageError)
