"""The catalog's record types: one frozen dataclass per kind of part (accelerators,
links, switches, NICs, systems, optics, fibres, models, failure rates and classes), each
reading and checking its YAML entry, every figure a plain float in the canonical unit its
field names (``port_rate_Bps``: bytes/s per direction); :mod:`topomodel.inputs.catalog` loads them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from topomodel.inputs.records import (
    Invalid,
    Reading,
    bandwidth,
    boolean,
    choice,
    did_you_mean,
    fraction,
    integer,
    list_of,
    mapping_of,
    quantity,
    record,
    ref,
    spec,
    text,
    yaml_keys,
)
from topomodel.inputs.transports import TRANSPORTS
from topomodel.inputs.yamlsource import KeyPath
from topomodel.vocabulary import CABLE_MEDIA, COLLECTIVES

PROVENANCES = ("datasheet", "paper", "secondary", "measured", "derived", "unverified",
               "assumed")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")
ENTRY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_RELATIVE_TOLERANCE = 0.01  # published aggregates are rounded (51.2 Tb/s, 115.2 Tb/s)

E = TypeVar("E", bound="Entry")


class Entries(Protocol):
    """What an entry's cross-check reads of its catalog (a :class:`~.catalog.Catalog`)."""

    def get(self, ident: str, cls: type[E]) -> E: ...  # the entry ``ident``, a ``cls``


def provenance_map(reading: Reading, path: KeyPath, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise Invalid("expected a mapping from a key of this entry to its provenance")
    read = choice(*PROVENANCES)
    return {str(key): read(reading, (*path, key), item) for key, item in value.items()}


@dataclass(frozen=True, kw_only=True)
class Entry:
    """Fields every catalog entry has: identity, source and provenance."""

    id: str
    file: str
    line: int | None
    name: str = spec(text, default="")
    vendor: str = spec(text, default="")
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    figure_provenance: dict[str, str] = spec(provenance_map, default={})
    notes: str = spec(text, default="")

    kind = "entry"

    def __post_init__(self) -> None:
        keys = yaml_keys(type(self))
        for key in self.figure_provenance:
            if key not in keys:
                raise Invalid("not a key of this entry" + did_you_mean(key, keys),
                              "figure_provenance")

    @property
    def title(self) -> str:
        """Display name, falling back to the id."""
        return self.name or self.id

    def provenance_of(self, key: str) -> str:
        """Provenance of one figure (YAML key), or of the entry."""
        return self.figure_provenance.get(key, self.provenance)

    def measured_from(self, key: str) -> str | None:
        """The files figure ``key`` was measured in, when its provenance is ``measured``
        (as ``topomodel calibrate`` writes it in the source: ``KEY: measured (FILES)``),
        else None."""
        if self.provenance_of(key) != "measured":
            return None
        found = re.search(rf"\b{re.escape(key)}: measured \(([^)]*)\)", self.source)
        return found[1] if found else "source not named"

    def check(self, catalog: Entries) -> Iterator[tuple[str, str]]:
        """Problems that need other entries: (key path under the entry, message)."""
        return iter(())


@dataclass(frozen=True, kw_only=True)
class Part(Entry):
    """An entry the bill of materials counts, with its power.

    ``power`` is the maximum (rated, provisioning) figure and ``power_typical`` the
    typical one; give whichever the source publishes, or both. A part's price is not
    here: it is a record of the catalog's ``prices`` section
    (:mod:`topomodel.inputs.prices`), with its own source, date and range.
    """

    power_W: float | None = spec(quantity("power"), key="power", default=None,
                                 doc="maximum power per item (per end for an optic)")
    power_typical_W: float | None = spec(quantity("power"), key="power_typical",
                                         default=None, doc="typical power per item")


GEMM_CLOCKS = ("burst", "sustained")
"""How a GEMM sweep was timed (:class:`GemmSweep` ``clocks``): before the clocks settle
under the power limit, or after. The step model slows a burst sweep to sustained clocks
(``analysis.training.compute.SUSTAINED_VS_BURST``)."""


@dataclass(frozen=True)
class GemmPoint:
    """One measured matrix multiply: an M x K by K x N product and its achieved rate."""

    m: int = spec(integer(1))
    n: int = spec(integer(1))
    k: int = spec(integer(1))
    rate_flops: float = spec(quantity("compute_rate"), key="rate", doc="achieved FLOP/s")

    @property
    def flops(self) -> float:
        """FLOPs of one product, 2 M N K."""
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True, kw_only=True)
class GemmSweep:
    """GEMM rates of one data type measured in one benchmark, with its source.

    ``peak`` is the dense peak the efficiencies are taken against when the entry's
    ``peak_flops`` has none for ``dtype`` (the A100 entry lists bf16, its fp16 sweep
    runs on the same tensor cores at the same peak).
    """

    dtype: str = spec(choice(*DTYPES))
    points: tuple[GemmPoint, ...] = spec(list_of(record(GemmPoint)))
    peak_flops: float | None = spec(quantity("compute_rate"), key="peak", default=None,
                                    doc="dense peak of dtype, when peak_flops lacks it")
    clocks: str = spec(choice(*GEMM_CLOCKS), default="burst",
                       doc="burst: a short run the power limit has not yet slowed"
                           " (tens of iterations); sustained: timed after the clocks"
                           " settled under the power limit")
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    notes: str = spec(text, default="")


@dataclass(frozen=True, kw_only=True)
class HbmMeasurement:
    """A measured memory bandwidth (a STREAM-like kernel), with its source."""

    rate_Bps: float = spec(quantity("rate"), key="rate", doc="achieved bytes/s")
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    notes: str = spec(text, default="")


ATTENTION_KERNELS = ("cudnn", "flash-attention-2", "flash-attention-3",
                     "flash-attention-4")
"""Fused-attention kernels a catalog rate may name (:class:`AttentionMeasurement`)."""

ATTENTION_PASSES = ("forward", "backward", "forward+backward")
"""What a fused-attention rate times: one pass, or both (FLOPs of both over the time of
both, as FlashAttention's ``benchmark_flash_attention.py`` reports ``fwd + bwd``)."""


@dataclass(frozen=True, kw_only=True)
class AttentionMeasurement:
    """A measured fused-attention rate of one kernel, one pass, at one shape, with its
    source. The rate counts the FLOPs the kernel does (half of the full count for a
    causal mask), as FlashAttention's benchmarks count them."""

    dtype: str = spec(choice(*DTYPES))
    kernel: str = spec(choice(*ATTENTION_KERNELS), doc="the attention kernel measured")
    pass_name: str = spec(choice(*ATTENTION_PASSES), key="pass",
                          doc="the pass the rate times")
    causal: bool | None = spec(boolean, default=None,
                               doc="whether the mask was causal (absent: not stated)")
    rate_flops: float = spec(quantity("compute_rate"), key="rate", doc="achieved FLOP/s")
    head_dim: int = spec(integer(1))
    seq: int = spec(integer(1))
    batch: int = spec(integer(1))
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    notes: str = spec(text, default="")


@dataclass(frozen=True, kw_only=True)
class Accelerator(Part):
    """A compute device: dense peak FLOP/s per data type, HBM, power, scale-up links,
    and the measured kernel rates the step model's compute efficiency comes from:
    GEMM sweeps (``gemm``), achieved HBM bandwidth (``hbm_achieved``) and fused
    attention (``flash_attention``), each with its own source and provenance."""

    kind = "accelerator"
    peak_flops: dict[str, float] = spec(mapping_of(DTYPES, quantity("compute_rate")),
                                        doc="dense peak, FLOP/s, by data type")
    hbm_bytes: float = spec(quantity("size"), key="hbm_capacity")
    hbm_Bps: float = spec(quantity("rate"), key="hbm_bandwidth")
    scaleup_link: str | None = spec(ref("scaleup_link"), default=None)
    scaleup_link_count: int = spec(integer(1), default=0)
    gemm: tuple[GemmSweep, ...] = spec(list_of(record(GemmSweep)), default=(),
                                       doc="measured GEMM rates by data type")
    hbm_achieved: HbmMeasurement | None = spec(record(HbmMeasurement), default=None,
                                               doc="measured HBM bandwidth (STREAM-like)")
    flash_attention: tuple[AttentionMeasurement, ...] = spec(
        list_of(record(AttentionMeasurement)), default=(),
        doc="measured fused-attention rates")

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.scaleup_link) != bool(self.scaleup_link_count):
            raise Invalid("give scaleup_link and scaleup_link_count together",
                          "scaleup_link_count")
        for index, sweep in enumerate(self.gemm):
            if sweep.peak_flops is None and sweep.dtype not in self.peak_flops:
                raise Invalid(f"gemm[{index}]: no {sweep.dtype} peak in peak_flops; give"
                              " the sweep's peak", "gemm")
        for index, point in enumerate(self.flash_attention):
            if point.dtype not in self.peak_flops:
                raise Invalid(f"flash_attention[{index}]: no {point.dtype} peak in"
                              " peak_flops", "flash_attention")


@dataclass(frozen=True, kw_only=True)
class ScaleupLink(Entry):
    """One scale-up link (NVLink, Infinity Fabric, ICI, UB), per-direction rate."""

    kind = "scaleup_link"
    link_rate_Bps: float = spec(bandwidth, key="link_rate")
    efficiency: float = spec(fraction, default=1.0, doc="effective / nominal rate")
    latency_s: float | None = spec(quantity("time"), key="latency", default=None)


@dataclass(frozen=True, kw_only=True)
class ScaleupSwitch(Part):
    """A scale-up switch chip (NVSwitch, UB switch)."""

    kind = "scaleup_switch"
    ports: int = spec(integer(1))
    port_rate_Bps: float = spec(bandwidth, key="port_rate")
    in_network_reduction: bool = spec(boolean, default=False)
    nvls_efficiency: float | None = spec(
        fraction, default=None,
        doc="share of the links' effective rate an in-switch reduction (NVLS) reaches;"
        " unset: the links' effective rate, nothing being known to derate it")
    latency_s: float | None = spec(quantity("time"), key="latency", default=None)


@dataclass(frozen=True, kw_only=True)
class HostLink(Entry):
    """A host interface (PCIe generation and width)."""

    kind = "host_link"
    rate_Bps: float = spec(bandwidth, key="rate")
    signalling_Tps: float | None = spec(quantity("transfer_rate"), key="signalling",
                                        default=None, doc="transfers/s per lane")
    lanes: int | None = spec(integer(1), default=None)
    efficiency: float = spec(fraction, default=1.0, doc="effective / nominal rate (the"
                             " data rate a transfer across it reaches)")


@dataclass(frozen=True, kw_only=True)
class Nic(Part):
    """A scale-out network adapter."""

    kind = "nic"
    ports: int = spec(integer(1))
    port_rate_Bps: float = spec(bandwidth, key="port_rate")
    protocols: tuple[str, ...] = spec(list_of(choice("infiniband", "ethernet")))
    host_link: str | None = spec(ref("host_link"), default=None)
    transport: str | None = spec(
        choice(*TRANSPORTS), default=None,
        doc="its NCCL transport (transports.TRANSPORTS: efa); unset: RDMA over its"
        " switch's protocol (InfiniBand verbs, RoCEv2 on Ethernet)")
    net_latency_s: float | None = spec(
        quantity("time"), key="net_latency", default=None,
        doc="latency its NCCL net plugin reports for it (added to each network hop);"
        " unset: its transport's")
    low_latency_protocols: bool | None = spec(
        boolean, default=None, doc="whether NCCL's LL and LL128 may cross it; unset: its"
        " transport's (false where a plugin forces NCCL_PROTO=Simple)")
    efficiency: float | None = spec(
        fraction, default=None,
        doc="effective / nominal rate of the network links it drives (leaf and above);"
        " unset: its transport's packet efficiency. Set by topomodel calibrate from"
        " runs a network tier bounds (docs/calibrate.md)")

    @property
    def rate_Bps(self) -> float:
        """All ports together, bytes/s per direction."""
        return self.ports * self.port_rate_Bps


@dataclass(frozen=True, kw_only=True)
class Breakout:
    """Another port mode of a switch (e.g. 128 x 200G instead of 64 x 400G)."""

    ports: int = spec(integer(1))
    port_rate_Bps: float = spec(bandwidth, key="port_rate")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_RELATIVE_TOLERANCE)


@dataclass(frozen=True, kw_only=True)
class Switch(Part):
    """A scale-out switch: radix at a port rate, breakouts, and the vendor's aggregate."""

    kind = "switch"
    protocol: str = spec(choice("infiniband", "ethernet"))
    ports: int = spec(integer(1))
    port_rate_Bps: float = spec(bandwidth, key="port_rate")
    breakouts: tuple[Breakout, ...] = spec(list_of(record(Breakout)), default=())
    capacity_Bps: float | None = spec(bandwidth, key="capacity", default=None,
                                      doc="published aggregate, per direction")
    latency_s: float | None = spec(quantity("time"), key="latency", default=None)
    buffer_bytes: float | None = spec(quantity("size"), key="buffer", default=None)
    in_network_reduction: bool = spec(boolean, default=False)
    adaptive_routing: bool = spec(boolean, default=False, doc="routes adaptively or sprays")

    def __post_init__(self) -> None:
        super().__post_init__()
        total = self.ports * self.port_rate_Bps
        if self.capacity_Bps is not None and not _close(self.capacity_Bps, total):
            ratio = self.capacity_Bps / total
            hint = (" (it looks like a bidirectional total: mark it 'bidir')" if _close(ratio, 2)
                    else " (it looks like a per-direction sum: mark it '/dir')"
                    if _close(ratio, 0.5) else "")
            raise Invalid(
                f"capacity is {ratio:.3g}x ports x port_rate per direction{hint}", "capacity")
        for index, mode in enumerate(self.breakouts):
            if not _close(mode.ports * mode.port_rate_Bps, total):
                raise Invalid("a breakout must keep ports x port_rate equal to the switch's",
                              f"breakouts[{index}]")

    @property
    def capacity_per_direction_Bps(self) -> float:
        """Sum of port rates one way, bytes/s."""
        return self.ports * self.port_rate_Bps

    def radix_at(self, rate_Bps: float) -> int:
        """Ports available at ``rate_Bps`` per direction (native or by breakout)."""
        modes = [(self.ports, self.port_rate_Bps)] + [
            (b.ports, b.port_rate_Bps) for b in self.breakouts]
        for ports, port_rate in modes:
            if _close(port_rate, rate_Bps):
                return ports
        return 0


SYSTEM_SCALEUP_KINDS = ("switched", "full_mesh", "torus", "pcie", "none")
"""The scale-up kinds a system's own wiring may be (a design may also ask for a
``supernode`` over switched systems, :data:`topomodel.inputs.design.SCALEUP_KINDS`)."""


@dataclass(frozen=True, kw_only=True)
class ScaleupWiring:
    """How a system's accelerators are wired for scale-up."""

    kind: str = spec(choice(*SYSTEM_SCALEUP_KINDS))
    link: str | None = spec(ref("scaleup_link"), default=None)
    switch: str | None = spec(ref("scaleup_switch"), default=None)
    switches: int = spec(integer(0), default=0)
    links_per_switch: tuple[int, ...] = spec(list_of(integer(1)), default=())
    shape: tuple[int, ...] = spec(list_of(integer(1)), default=())
    wraparound: bool = spec(boolean, default=True)
    root: str | None = spec(ref("scaleup_switch"), default=None,
                            doc="pcie: the host CPU's root complex (one per socket)")
    sockets: int = spec(integer(1), default=1,
                        doc="pcie: CPU sockets; PCIe switches (or GPUs) split evenly")
    socket_link: str | None = spec(ref("scaleup_link"), default=None,
                                   doc="pcie: the link between two sockets (UPI, xGMI)")

    def __post_init__(self) -> None:
        if self.kind == "switched":
            if not self.switch or not self.switches:
                raise Invalid("a switched scale-up needs 'switch' and 'switches'")
            if len(self.links_per_switch) != self.switches:
                raise Invalid(f"give one entry per switch ({self.switches})",
                              "links_per_switch")
        if self.kind == "torus" and not self.shape:
            raise Invalid("a torus scale-up needs 'shape'")
        if self.kind == "pcie":
            if not self.root or not self.link:
                raise Invalid("a pcie scale-up needs 'link' (GPU to switch or root port)"
                              " and 'root' (the CPU's root complex)")
            if self.switches and not self.switch:
                raise Invalid("give the PCIe switch chip of 'switches'", "switch")
            if self.sockets > 1 and not self.socket_link:
                raise Invalid("two or more sockets need 'socket_link'", "socket_link")
            if self.switches % self.sockets:
                raise Invalid(f"{self.switches} PCIe switches do not split over"
                              f" {self.sockets} sockets", "switches")


def _curve_point(reading: Reading, path: KeyPath, value: Any) -> tuple[float, float]:
    """``[size, busbw]``: bytes as nccl-tests counts them, and bytes/s of busbw."""
    if not isinstance(value, list) or len(value) != 2:
        raise Invalid('expected a pair [size, busbw], e.g. ["64 MiB", "166.63 GB/s"]')
    size = quantity("size")(reading, path, value[0])
    busbw = quantity("rate")(reading, path, value[1])
    if size <= 0 or busbw <= 0:
        raise Invalid("size and busbw must be positive")
    return size, busbw


_POINT_LIST = list_of(_curve_point, min_len=2, what="a list of [size, busbw] pairs")


def curve_points(reading: Reading, path: KeyPath, value: Any
                  ) -> tuple[tuple[float, float], ...]:
    """At least two ``[size, busbw]`` pairs, sizes strictly increasing."""
    points: tuple[tuple[float, float], ...] = _POINT_LIST(reading, path, value)
    for index in range(1, len(points)):
        if points[index][0] <= points[index - 1][0]:
            raise Invalid("sizes must be strictly increasing (this size is not above"
                          " the one before)", index)
    return points


@dataclass(frozen=True, kw_only=True)
class MeasuredCollective:
    """A measured nccl-tests curve of one collective on one group size inside the
    system: ``points`` are ``[size, busbw]`` pairs, sizes strictly increasing, in bytes
    as nccl-tests counts them and busbw in bytes/s as nccl-tests defines it."""

    collective: str = spec(choice(*COLLECTIVES))
    ranks: int = spec(integer(2), doc="GPUs in the measured group")
    points: tuple[tuple[float, float], ...] = spec(
        curve_points, doc="the measured points")
    source: str = spec(text, doc="a citation a reader can follow")
    provenance: str = spec(choice(*PROVENANCES))
    notes: str = spec(text, default="")


@dataclass(frozen=True, kw_only=True)
class System(Part):
    """A server, node or rack: accelerators, their scale-up wiring and their NICs."""

    kind = "system"
    accelerator: str = spec(ref("accelerator"))
    accelerators: int = spec(integer(1))
    form: str = spec(choice("server", "node", "rack"), default="server")
    scaleup: ScaleupWiring = spec(record(ScaleupWiring))
    nic: str | None = spec(ref("nic"), default=None)
    nic_count: int = spec(integer(1), default=0)
    host_link: str | None = spec(ref("host_link"), default=None)
    hosts: int = spec(integer(1), default=1, doc="host servers (compute trays) inside")
    measured_collectives: tuple[MeasuredCollective, ...] = spec(
        list_of(record(MeasuredCollective)), default=(),
        doc="measured nccl-tests curves inside one system, each timing its collective"
        " on groups of its size there (docs/catalog-format.md)")
    launch_latency_s: float | None = spec(
        quantity("time"), key="launch_latency", default=None,
        doc="time a collective takes on this system beyond NCCL's latency model, added"
        " to every collective's latency (the launch and host overhead nccl-tests' times"
        " include and NCCL's tuner leaves out); unset: none, NCCL's model alone. Set by"
        " topomodel calibrate from latency-bound sizes (docs/calibrate.md)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.nic) != bool(self.nic_count):
            raise Invalid("give nic and nic_count together", "nic_count")
        seen: set[tuple[str, int]] = set()
        for index, curve in enumerate(self.measured_collectives):
            if curve.ranks > self.accelerators:
                raise Invalid(f"measured_collectives[{index}]: {curve.ranks} ranks, but"
                              f" the system has {self.accelerators} accelerators",
                              "measured_collectives")
            if (curve.collective, curve.ranks) in seen:
                raise Invalid(f"measured_collectives[{index}]: a second"
                              f" {curve.collective} curve on {curve.ranks} ranks",
                              "measured_collectives")
            seen.add((curve.collective, curve.ranks))
        shape = self.scaleup.shape
        if self.scaleup.kind == "torus" and math.prod(shape) != self.accelerators:
            raise Invalid(f"torus shape {list(shape)} holds {math.prod(shape)} accelerators,"
                          f" not {self.accelerators}", "scaleup.shape")

    def check(self, catalog: Entries) -> Iterator[tuple[str, str]]:
        accelerator = catalog.get(self.accelerator, Accelerator)
        wiring = self.scaleup
        links = accelerator.scaleup_link_count
        if wiring.kind == "switched" and links and sum(wiring.links_per_switch) != links:
            yield ("scaleup.links_per_switch",
                   f"adds up to {sum(wiring.links_per_switch)} links per accelerator, but"
                   f" {self.accelerator} has {links}")
        if wiring.kind == "full_mesh" and links and links < self.accelerators - 1:
            yield ("scaleup.kind", f"a full mesh of {self.accelerators} needs"
                   f" {self.accelerators - 1} links per accelerator; {self.accelerator}"
                   f" has {links}")
        under = wiring.switches or wiring.sockets
        if wiring.kind == "pcie" and self.accelerators % under:
            yield ("scaleup.switches" if wiring.switches else "scaleup.sockets",
                   f"{self.accelerators} accelerators do not split evenly over {under}"
                   f" {'PCIe switches' if wiring.switches else 'sockets'}")
        if wiring.kind != "none" and not (wiring.link or accelerator.scaleup_link):
            yield ("scaleup.link", f"no scale-up link given and {self.accelerator} names none")
        if wiring.switch and wiring.links_per_switch:
            chip = catalog.get(wiring.switch, ScaleupSwitch)
            used = self.accelerators * max(wiring.links_per_switch)
            if used > chip.ports:
                yield ("scaleup.links_per_switch",
                       f"{self.accelerators} accelerators x {max(wiring.links_per_switch)}"
                       f" links need {used} ports of {chip.id}, which has {chip.ports}")


@dataclass(frozen=True, kw_only=True)
class Optic(Part):
    """A cable or optical module: medium, packaging, rate, reach, power per end."""

    kind = "optic"
    medium: str = spec(choice(*CABLE_MEDIA))
    form: str = spec(choice("dac", "acc", "aec", "aoc", "twisted_pair", "transceiver", "lpo",
                             "cpo"))
    rate_Bps: float = spec(bandwidth, key="rate")
    reach_m: float = spec(quantity("length"), key="reach")
    max_channel_loss_dB: float | None = spec(quantity("loss"), key="max_channel_loss",
                                             default=None)
    fibre: str | None = spec(ref("fibre"), default=None)

    @property
    def energy_pJ_per_bit(self) -> float | None:
        """Power per end over the one-way bit rate, pJ/bit (derived)."""
        if self.power_W is None:
            return None
        return self.power_W / (self.rate_Bps * 8) * 1e12


@dataclass(frozen=True, kw_only=True)
class Fibre(Entry):
    """A fibre type: attenuation and connection losses."""

    kind = "fibre"
    loss_dB_per_km: float = spec(quantity("loss_per_length"), key="loss_per_length")
    connector_loss_dB: float = spec(quantity("loss"), key="connector_loss",
                                    doc="per mated pair")
    splice_loss_dB: float = spec(quantity("loss"), key="splice_loss", default=0.0)


@dataclass(frozen=True, kw_only=True)
class Model(Entry):
    """A transformer architecture: dense, or mixture-of-experts (MoE)."""

    kind = "model"
    layers: int = spec(integer(1))
    hidden: int = spec(integer(1), doc="model width d")
    ffn_hidden: int = spec(integer(1), doc="dense FFN inner width")
    heads: int = spec(integer(1))
    kv_heads: int = spec(integer(1), default=0, doc="key/value heads (GQA); default heads")
    head_dim: int = spec(integer(1), default=0, doc="default hidden / heads")
    vocab: int = spec(integer(1))
    sequence: int = spec(integer(1), doc="training sequence length, tokens")
    gated_ffn: bool = spec(boolean, default=True, doc="SwiGLU-style: 3 FFN matrices")
    tied_embeddings: bool = spec(boolean, default=False)
    rotary: bool = spec(boolean, default=True, doc="RoPE on every layer's queries and"
                        " keys; false: learned absolute positions (GPT-2, GPT-3)")
    experts: int = spec(integer(0), default=0, doc="routed experts per MoE layer")
    top_k: int = spec(integer(0), default=0, doc="routed experts per token")
    shared_experts: int = spec(integer(0), default=0)
    expert_ffn_hidden: int = spec(integer(0), default=0)
    dense_layers: int = spec(integer(0), default=0, doc="leading dense-FFN layers (MoE)")
    kv_lora_rank: int = spec(integer(0), default=0,
                             doc="latent attention (MLA): the compressed KV latent's width"
                             " per token and layer, what the KV cache holds; 0: none")
    qk_rope_head_dim: int = spec(integer(0), default=0,
                                 doc="latent attention (MLA): the decoupled RoPE key's width"
                                 " per token and layer, cached beside the latent")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.experts and not (self.top_k and self.expert_ffn_hidden):
            raise Invalid("an MoE model needs top_k and expert_ffn_hidden", "experts")
        if self.top_k > self.experts:
            raise Invalid("top_k cannot exceed experts", "top_k")
        if self.dense_layers > self.layers:
            raise Invalid("more dense layers than layers", "dense_layers")

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.experts > 0
