"""The options of a job (a training step, its goodput, a decode step), declared once.

:data:`OPTIONS` lists every option a step takes: the model, the parallel layout, the
step and time-model assumptions, and the what-ifs (failed parts, faster scale-out,
routing); then the goodput model's (:data:`GOODPUT_OPTIONS`), decode's
(:data:`DECODE_OPTIONS`), serving's (:data:`SERVE_OPTIONS`) and the running cost's
(:data:`COST_OPTIONS`). Each option's
reader, default and text come from the field it sets
(:class:`~topomodel.traffic.layout.Layout`, :class:`~topomodel.analysis.training.step.
StepAssumptions`, :class:`~topomodel.analysis.collectives.timing.TimeModel`,
:class:`~topomodel.analysis.reliability.goodput.GoodputAssumptions`,
:class:`~topomodel.analysis.serving.decode_assumptions.DecodeAssumptions`), so the CLI
flags of step, compare, scale, goodput, review, draw and decode, the sweep parameters and
the review's assumptions show one text and check values with one piece of code. The per-tier
option ``efficiency.TIER`` is found by :func:`option`. What a schedule overlaps is not
a number here: it follows from the layout's mechanisms (``tp_overlap``,
``ep_overlap``, ``dp_overlap``) and the compute the timeline runs beside each
collective.

Examples
--------
>>> inputs = step_inputs({"model": "llama3-70b", "tp": 8, "tp_overlap": "gemm"})
>>> inputs.layout.tp, inputs.layout.tp_overlap, inputs.fill_dp
(8, 'gemm', True)
>>> read_value("tp", 0)
Traceback (most recent call last):
...
topomodel.inputs.records.Invalid: must be at least 1, got 0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from topomodel.analysis.assumptions import (
    CostAssumptions,
    GoodputAssumptions,
    StepAssumptions,
    TimeModel,
)
from topomodel.analysis.serving.decode_assumptions import DTYPES, DecodeAssumptions
from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
from topomodel.inputs.records import (
    Invalid,
    Reader,
    Reading,
    choice,
    integer,
    list_of,
    number,
    text,
)
from topomodel.inputs.reliability import DOMAIN_KINDS
from topomodel.inputs.software import DEFAULT_SOFTWARE, PRESETS, resolved
from topomodel.inputs.yamlsource import KeyPath, Source
from topomodel.traffic.layout import Layout
from topomodel.vocabulary import AUTO_ROUTING, LINK_TIERS, ROUTING_CHOICES

EFFICIENCY_PREFIX = "efficiency."
_NO_READING = Reading(Source("<option>", ""))


@dataclass(frozen=True)
class StepOption:
    """One option of a step: what it sets, its default, reader and meaning.

    ``target`` is ``layout.FIELD``, ``assumptions.FIELD``, ``time.FIELD``, ``model``,
    ``run.NAME`` (routing, seed, failures, the scale-out what-if), ``goodput.FIELD``,
    ``decode.FIELD``, ``serve.FIELD`` or ``cost.FIELD``; ``arg`` says how a
    command line writes it: ``int``, ``float``, ``text``, ``bool`` (a ``--x/--no-x``
    flag), ``list`` (repeatable) or ``pairs`` (repeatable ``NAME=F``).
    """

    key: str
    target: str
    default: Any
    read: Reader
    doc: str
    arg: str
    metavar: str | None = None

    @property
    def flag(self) -> str:
        """The command-line flag, ``--micro-batch`` for ``micro_batch``."""
        return "--" + self.key.replace("_", "-")

    @property
    def quantity_kind(self) -> str | None:
        """The unit kind of an option written as a quantity (``"40 MB"``), else None."""
        return getattr(self.read, "kind", None) if self.arg == "text" else None

    def default_text(self) -> str:
        """The default as a person writes it (``40 MB``, ``5 us``, ``dp=0.8``), ``true`` or
        ``false`` for a switch, empty where there is none.

        Examples
        --------
        >>> OPTIONS["overhead"].default_text(), OPTIONS["pxn"].default_text()
        ('5 us', 'true')
        >>> OPTIONS["bucket"].default_text()  # none: a rule decides (its doc says which)
        ''

        """
        from topomodel.inputs.units import format_rate, format_si, format_size

        value: Any = self.default
        if self.arg == "bool":
            return "true" if value else "false"
        if value in (None, (), {}):
            return ""
        if self.quantity_kind == "size":
            return format_size(value)
        if self.quantity_kind == "time":
            return format_si(value, "s")
        if self.quantity_kind == "rate":
            return format_rate(value)
        if isinstance(value, dict):
            return ", ".join(f"{k}={v:g}" for k, v in value.items())
        return str(value)


def _field(cls: type, name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


# PLR0913: one computation's arrays and options passed on as they are
def _from_field(key: str, cls: type, name: str, target: str, arg: str, *,  # noqa: PLR0913
                read: Reader | None = None, default: Any = dataclasses.MISSING,
                doc: str | None = None, metavar: str | None = None) -> StepOption:
    """An option whose reader, default and text are those of field ``cls.name``."""
    f = _field(cls, name)
    if default is dataclasses.MISSING:
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory())  # type: ignore[operator]
    return StepOption(key, f"{target}.{name}", default, read or f.metadata["read"],
                      doc or f.metadata["doc"], arg, metavar)


def _layout(key: str, arg: str = "int", **kw: Any) -> StepOption:
    return _from_field(key, Layout, key, "layout", arg, **kw)


def domain_spec(_: Reading, __: KeyPath, value: Any) -> str:
    """A failure domain as ``KIND:N``: one of
    :data:`~topomodel.inputs.reliability.DOMAIN_KINDS` and its 0-based number, as
    ``rack:0``.

    Examples
    --------
    >>> domain_spec(_NO_READING, (), " power_feed:3 ")
    'power_feed:3'
    >>> domain_spec(_NO_READING, (), "pdu:1")
    Traceback (most recent call last):
    ...
    topomodel.inputs.records.Invalid: 'pdu:1': expected KIND:N with KIND one of rack, \
power_feed, cooling_loop, plane, site and N a whole number from 0
    """
    kind, sep, number = str(value).strip().partition(":")
    if not (sep and kind in DOMAIN_KINDS and number.isdigit()):
        raise Invalid(f"{value!r}: expected KIND:N with KIND one of"
                      f" {', '.join(DOMAIN_KINDS)} and N a whole number from 0")
    return f"{kind}:{int(number)}"


_A, _T, _G, _D = StepAssumptions, TimeModel, GoodputAssumptions, DecodeAssumptions
_C, _S = CostAssumptions, ServeAssumptions
OPTIONS: dict[str, StepOption] = {o.key: o for o in (
    StepOption("model", "model", None, text, "model id from the catalog (required)", "text",
               "ID"),
    _layout("tp"), _layout("pp"),
    _layout("dp", read=integer(0), default=0,
            doc="data-parallel degree; 0 fills the design's accelerators"),
    _layout("ep"), _layout("cp"), _layout("micro_batch"), _layout("global_batch"),
    _layout("seq"), _layout("software", "text", metavar="NAME"),
    _layout("sequence_parallel", "bool"), _layout("zero", metavar="STAGE"),
    _layout("interleave"), _layout("schedule", "text", metavar="1f1b|zb-h1"),
    _layout("recompute", "text", metavar="none|selective|full"),
    _layout("flash_attention", "bool"), _layout("dropout", "bool"),
    _layout("pp_scatter_gather", "bool"), _layout("pp_blocking", "bool"),
    _layout("grad_accumulation_fusion", "bool"),
    _layout("tp_overlap", "text", metavar="none|backward|gemm"),
    _layout("ep_overlap", "text", metavar="none|dualpipe"), _layout("dp_overlap", "bool"),
    _layout("order", "text", metavar="ORDER"),
    _from_field("grad_precision", _A, "grad_dtype", "assumptions", "text"),
    _from_field("main_grad_precision", _A, "main_grad_dtype", "assumptions", "text"),
    _from_field("compute_efficiency", _A, "compute_efficiency", "assumptions", "float",
                metavar="F"),
    _from_field("hbm_efficiency", _A, "hbm_efficiency", "assumptions", "float",
                metavar="F"),
    _from_field("comm_sm_share", _A, "comm_sm_share", "assumptions", "float", metavar="F"),
    _from_field("hot_expert", _A, "hot_expert_factor", "assumptions", "float", metavar="F"),
    _from_field("jitter_cv", _A, "jitter_cv", "assumptions", "float", metavar="F"),
    _from_field("straggler_share", _A, "straggler_share", "assumptions", "float",
                metavar="F"),
    _from_field("straggler_slowdown", _A, "straggler_slowdown", "assumptions", "float",
                metavar="F"),
    _from_field("bucket", _A, "dp_bucket_bytes", "assumptions", "text", metavar="SIZE"),
    _from_field("overhead", _T, "per_message_overhead_s", "time", "text", metavar="TIME"),
    _from_field("efficiency", _T, "efficiency", "time", "pairs", metavar="TIER=F"),
    _from_field("protocol", _T, "protocol", "time", "text"),
    _from_field("pxn", _T, "pxn", "time", "bool"),
    _from_field("measured_curves", _T, "measured_curves", "time", "bool"),
    StepOption("scaleout_factor", "run.scaleout_factor", 1.0, number(1e-3, 1e3),
               "what-if: every scale-out link this many times faster (2: 800G NICs"
               " instead of 400G)", "float", "F"),
    StepOption("routing", "run.routing", AUTO_ROUTING, choice(*ROUTING_CHOICES),
               "routing policy: auto (the even split where the scale-out switches route"
               " adaptively, ECMP by seeded hash where they hash flows), ECMP even split,"
               " ECMP by seeded hash, or d-mod-k", "text"),
    StepOption("seed", "run.seed", 0, integer(0), "seed of hash routing", "int", "N"),
    StepOption("fail", "run.fail", (), list_of(text, min_len=0, what="a list of node names"),
               "fail a node (switch, NIC, accelerator) by name", "list", "NODE"),
    StepOption("fail_domain", "run.fail_domain", (),
               list_of(domain_spec, min_len=0, what="a list of KIND:N domains"),
               "fail a whole failure domain, the N-th (from 0) of its kind: rack,"
               " power_feed, cooling_loop, plane or site (every link of its nodes, as"
               " --fail fails a part's; docs/failure-domains.md)", "list", "KIND:N"),
    _from_field("checkpoint_size", _G, "checkpoint_bytes", "goodput", "text", metavar="SIZE"),
    _from_field("storage_bandwidth", _G, "storage_Bps", "goodput", "text", metavar="RATE"),
    _from_field("detection_time", _G, "detection_s", "goodput", "text", metavar="TIME"),
    _from_field("restart_time", _G, "restart_s", "goodput", "text", metavar="TIME"),
    _from_field("repair_time", _G, "repair_s", "goodput", "text", metavar="TIME"),
    _from_field("spare_systems", _G, "spare_systems", "goodput", "int", metavar="N"),
    _from_field("batch", _D, "batch", "decode", "int", metavar="B"),
    _from_field("context", _D, "context", "decode", "int", metavar="T"),
    _from_field("dtype", _D, "dtype", "decode", "text", metavar=DTYPES),
    _from_field("kv_dtype", _D, "kv_dtype", "decode", "text", metavar=DTYPES),
    _from_field("activation_dtype", _D, "activation_dtype", "decode", "text",
                metavar=DTYPES),
    _from_field("comm_overlap", _D, "comm_overlap", "decode", "float", metavar="F"),
    _from_field("prefill_tp", _S, "prefill_tp", "serve", "int"),
    _from_field("prefill_ep", _S, "prefill_ep", "serve", "int"),
    _from_field("prefill_instances", _S, "prefill_instances", "serve", "int"),
    _from_field("decode_tp", _S, "decode_tp", "serve", "int"),
    _from_field("decode_ep", _S, "decode_ep", "serve", "int"),
    _from_field("decode_instances", _S, "decode_instances", "serve", "int"),
    _from_field("placement", _S, "placement", "serve", "text",
                metavar="separate|packed|aggregated"),
    _from_field("input_tokens", _S, "input_tokens", "serve", "int", metavar="T"),
    _from_field("output_tokens", _S, "output_tokens", "serve", "int", metavar="T"),
    _from_field("rate", _S, "rate", "serve", "float", metavar="REQ_PER_S"),
    _from_field("prefill_load", _S, "prefill_load", "serve", "float", metavar="F"),
    _from_field("concurrency", _S, "concurrency", "serve", "int", metavar="SEQS"),
    _from_field("transfer", _S, "transfer", "serve", "text", metavar="layerwise|after"),
    _from_field("chunk_tokens", _S, "chunk_tokens", "serve", "int", metavar="T"),
    _from_field("pue", _C, "pue", "cost", "float", metavar="F"),
    _from_field("electricity_price", _C, "electricity_USD_per_kWh", "cost", "float",
                metavar="USD_PER_KWH"),
    _from_field("facility_capex", _C, "facility_USD_per_kW", "cost", "float",
                metavar="USD_PER_KW"),
    _from_field("amortisation_years", _C, "amortisation_years", "cost", "float",
                metavar="YEARS"),
    _from_field("facility_years", _C, "facility_years", "cost", "float", metavar="YEARS"),
    _from_field("cost_of_capital", _C, "cost_of_capital", "cost", "float", metavar="F"),
)}
"""Every step option by key (the sweep key; the flag is ``--key-with-dashes``)."""

GOODPUT_OPTIONS = tuple(k for k, o in OPTIONS.items() if o.target.startswith("goodput."))
"""The goodput model's options (checkpoint, storage, detection, restart, repair, spares):
set by the verbs that report goodput (step, goodput, review) and by sweeps and plans."""

DECODE_OPTIONS = tuple(k for k, o in OPTIONS.items() if o.target.startswith("decode."))
"""The decode model's own options (batch, context, data types, comm overlap): set by the
``decode`` verb only (sweeps, plans and the step run no decode)."""

SERVE_OPTIONS = tuple(k for k, o in OPTIONS.items() if o.target.startswith("serve."))
"""The serving model's own options (pools, placement, request mix, load, hand-off): set
by the ``serve`` verb only (sweeps, plans and the step run no serving job)."""

COST_OPTIONS = tuple(k for k, o in OPTIONS.items() if o.target.startswith("cost."))
"""The running cost's options (PUE, electricity price, facility capex, amortisation,
cost of capital): set by the verbs that report cost per token (step)."""

STEP_OPTIONS = tuple(k for k in OPTIONS
                     if k not in GOODPUT_OPTIONS + DECODE_OPTIONS + SERVE_OPTIONS
                     + COST_OPTIONS)
"""The options every step-shaped verb takes (the model, layout, assumptions, what-ifs)."""


def option(key: str) -> StepOption | None:
    """The :class:`StepOption` of ``key``, including ``efficiency.TIER``; ``None`` if
    it is not a step option.

    Examples
    --------
    >>> option("tp").default, option("efficiency.leaf").target
    (1, 'time.efficiency')
    >>> option("design.systems") is None
    True
    """
    if key in OPTIONS:
        return OPTIONS[key]
    tier = key.removeprefix(EFFICIENCY_PREFIX)
    if key.startswith(EFFICIENCY_PREFIX) and tier in LINK_TIERS:
        return StepOption(key, "time.efficiency", None, number(0, 1, low_open=True),
                          f"effective / nominal rate of {tier} links", "float", "F")
    return None


def read_value(key: str, value: Any) -> Any:
    """``value`` of option ``key`` in canonical form (quantities as floats).

    Raises
    ------
    Invalid
        For an unknown key or a value the option's reader refuses.
    """
    opt = option(key)
    if opt is None:
        raise Invalid(f"not a step option: {key!r}")
    return opt.read(_NO_READING, (key,), value)


@dataclass(frozen=True)
class StepInputs:
    """Everything a step needs besides the fabric: the model id, the layout (DP filled
    to the fabric when ``fill_dp``), the assumptions and the what-ifs; and the goodput
    model's and decode's assumptions, for the verbs that run them."""

    model: str | None
    layout: Layout
    fill_dp: bool
    assumptions: StepAssumptions
    routing: str = AUTO_ROUTING
    seed: int = 0
    fail: tuple[str, ...] = ()
    scaleout_factor: float = 1.0
    fail_domain: tuple[str, ...] = ()  # KIND:N failure domains failed whole
    goodput: GoodputAssumptions = field(default_factory=GoodputAssumptions)
    decode: DecodeAssumptions = field(default_factory=DecodeAssumptions)
    serve: ServeAssumptions = field(default_factory=ServeAssumptions)
    cost: CostAssumptions = field(default_factory=CostAssumptions)


def step_inputs(values: Mapping[str, Any], *, path: KeyPath = (),
                require_model: bool = True) -> StepInputs:
    """:class:`StepInputs` from option values by key (any not given has its default;
    ``None`` counts as not given).

    Each value is read by its option's reader, so text such as ``"40 MB"`` for
    ``bucket`` is accepted; ``efficiency.TIER`` sets one tier.

    Raises
    ------
    Invalid
        Naming the key (``exc.key``) of the first value that is refused.
    """
    layout: dict[str, Any] = {}
    assumptions: dict[str, Any] = {}
    time: dict[str, Any] = {}
    run: dict[str, Any] = {}
    goodput: dict[str, Any] = {}
    decode: dict[str, Any] = {}
    serve: dict[str, Any] = {}
    cost: dict[str, Any] = {}
    efficiency: dict[str, float] = {}
    model = None
    software = values.get("software") or DEFAULT_SOFTWARE
    if software in PRESETS:  # an unknown name is refused by the option's reader below
        values = {**values, **resolved(software, values)}
    for key, raw in values.items():
        opt = option(key)
        if opt is None:
            raise Invalid(f"not a step option{_hint(key)}", key)
        if raw is None:
            continue
        try:
            value = opt.read(_NO_READING, (*path, key), raw)
        except Invalid as exc:
            raise Invalid(exc.message, key) from None
        where, _, name = opt.target.partition(".")
        if key.startswith(EFFICIENCY_PREFIX):
            efficiency[key.removeprefix(EFFICIENCY_PREFIX)] = value
        elif where == "model":
            model = value
        else:
            {"layout": layout, "assumptions": assumptions, "time": time,
             "run": run, "goodput": goodput, "decode": decode, "serve": serve,
             "cost": cost}[where][name] = value
    if model is None and require_model:
        raise Invalid("missing the model id", "model")
    base = StepAssumptions()
    efficiency = {**time.pop("efficiency", {}), **efficiency}
    dp = layout.get("dp", 0)  # 0: filled to the fabric later; EP must divide it meanwhile
    return StepInputs(
        model=model, layout=Layout(**{**layout, "dp": dp or layout.get("ep", 1)}),
        fill_dp=not dp,
        assumptions=replace(base, **assumptions,
                            time=TimeModel(**time, efficiency=efficiency)),
        routing=run.get("routing", AUTO_ROUTING), seed=run.get("seed", 0),
        fail=tuple(run.get("fail", ())), scaleout_factor=run.get("scaleout_factor", 1.0),
        fail_domain=tuple(dict.fromkeys(run.get("fail_domain", ()))),
        goodput=GoodputAssumptions(**goodput), decode=DecodeAssumptions(**decode),
        serve=ServeAssumptions(**serve), cost=CostAssumptions(**cost))


def software_departures(layout: Layout, assumptions: StepAssumptions) -> dict[str, Any]:
    """The switches whose value differs from the layout's software preset, by option key.

    Examples
    --------
    >>> software_departures(Layout(), StepAssumptions())
    {}
    >>> software_departures(Layout(software="nemo-2", zero=0), StepAssumptions())
    {'zero': 0, 'grad_precision': 'fp32', 'main_grad_precision': 'fp32'}
    """
    owners = {"layout": layout, "assumptions": assumptions}
    expected = resolved(layout.software, {"interleave": layout.interleave})
    out = {}
    for key, value in expected.items():
        where, _, name = OPTIONS[key].target.partition(".")
        actual = getattr(owners[where], name)
        if actual != value:
            out[key] = actual
    return out


def software_text(layout: Layout, assumptions: StepAssumptions) -> str:
    """One line naming the software preset and every switch set apart from it.

    Examples
    --------
    >>> print(software_text(Layout(tp_overlap="none"), StepAssumptions()))
    mcore-2024 (Megatron-Core 0.8 with the README flags); set apart: tp_overlap none
    """
    preset = PRESETS[layout.software]
    apart = software_departures(layout, assumptions)
    shown = ", ".join(f"{k} {_shown(v)}" for k, v in apart.items())
    return f"{preset.name} ({preset.framework})" + (f"; set apart: {shown}" if shown else "")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _hint(key: str) -> str:
    from topomodel.inputs.records import did_you_mean

    return did_you_mean(key, OPTIONS)
