"""Read NCCL's topology dump (the XML file ``NCCL_TOPO_DUMP_FILE`` names).

The layout read is the one NCCL writes (``src/graph/xml.cc`` ``ncclTopoDumpXmlRec``, its
elements and attributes set in ``xml.cc`` and ``topo.cc``, NVIDIA/nccl @ 5067397c): one
element per line, attributes in double quotes, no XML declaration::

    <system version="1">
      <cpu host_hash=".." numaid="0" affinity=".." arch="x86_64" vendor="GenuineIntel"
           familyid="6" modelid="143">
        <pci busid="0000:18:00.0" class="0x060400" vendor="0x1000" device="0xc030"
             link_speed="32.0 GT/s PCIe" link_width="16">          (a PCIe switch)
          <pci busid="0000:1b:00.0" class="0x030200" ...>           (a GPU)
            <gpu dev="0" sm="90" rank="0" gdr="1">
              <nvlink target="0000:05:00.0" count="5" tclass="0x068000"/>
            </gpu>
          </pci>
          <pci busid="0000:1a:00.0" class="0x020700" ...>           (a NIC)
            <nic>
              <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0"
                   guid=".." maxconn="131072" gdr="1"/>
            </nic>
          </pci>
        </pci>
      </cpu>
    </system>

NCCL walks up the PCI tree two levels at a time, so a ``pci`` element that holds other
``pci`` elements is a PCIe switch (its upstream port); a ``pci`` holding a ``gpu`` is a
GPU and one holding a ``nic`` a NIC (each ``net`` under it a port NCCL uses). A ``net``'s
``speed`` is in Mb/s (10^6 bit/s) as the network plugin reports it (``400000`` is NDR's
400 Gb/s). An ``nvlink``'s ``tclass`` is the PCI class of what it reaches, matched as
NCCL does by prefix: ``0x068000`` an NVSwitch, ``0x03`` a GPU, ``0x068001`` a CPU.

Not read: ``pcilink`` (a PCIe peer link NCCL may use between two devices), ``c2c``
(Grace-Hopper's chip-to-chip link), ``host_hash``, the ``keep``/``mlopart``/``coll``/
``gin``/``rma`` bookkeeping and any element NCCL does not write (NCCL ignores them too).
A dump holds one host: what one process saw.

Bad input (not UTF-8, not XML, a ``<!DOCTYPE``, a missing or non-numeric attribute NCCL
always writes, no GPU) raises :class:`TopologyError`, one line naming the file, line and
element.

Examples
--------
>>> topo = parse_topology('''<system version="1">
...   <cpu numaid="0" arch="x86_64" vendor="GenuineIntel">
...     <pci busid="0000:1b:00.0" class="0x030200" vendor="0x10de" device="0x2330"
...          link_speed="32.0 GT/s PCIe" link_width="16">
...       <gpu dev="0" sm="90" rank="0" gdr="1">
...         <nvlink target="0000:05:00.0" count="18" tclass="0x068000"/>
...       </gpu>
...     </pci>
...   </cpu>
... </system>''')
>>> gpu = topo.gpus[0]
>>> gpu.generation, gpu.nvlink_count, gpu.nvlinks[0].kind, gpu.pci.pcie_gen
('Hopper', 18, 'nvswitch', 5)
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

from topomodel.errors import InputError, Problem
from topomodel.files import read_input_text

SM_GENERATIONS = {60: "Pascal", 61: "Pascal", 70: "Volta", 72: "Volta", 75: "Turing",
                  80: "Ampere", 86: "Ampere", 87: "Ampere", 89: "Ada Lovelace",
                  90: "Hopper", 100: "Blackwell", 103: "Blackwell", 110: "Blackwell",
                  120: "Blackwell"}
"""GPU generation by the ``sm`` NCCL writes (CUDA compute capability major x 10 + minor;
NVIDIA's CUDA GPUs page and the CUDA C++ Programming Guide, compute capabilities)."""

NVLINK_TARGET_CLASSES = (("0x068000", "nvswitch"), ("0x068001", "cpu"), ("0x03", "gpu"))
"""What an ``nvlink``'s ``tclass`` names, by prefix, in the order NCCL's
``kvDictPciClass`` (``src/graph/topo.cc``) tries them; anything else is ``other``."""

PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""PCIe generation by transfer rate per lane, GT/s (PCI-SIG; the strings of NCCL's
``kvDictPciGen``, ``2.5 GT/s`` to ``64.0 GT/s PCIe``)."""

INVISIBLE_TARGET = "fffffff:ffff:ff"
"""The ``target`` NCCL writes for an NVLink whose far end the GPU cannot see (an NVSwitch
hidden from a VM, ``xml.cc``); its count is known but not which chip it reaches."""

_GTPS = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")


class TopologyError(InputError):
    """An NCCL topology dump that cannot be read."""


@dataclass(frozen=True)
class PciDevice:
    """A ``pci`` element: bus id, class, vendor/device ids, its link, where it sits.

    ``switches`` are the bus ids of the PCIe switches above it, outermost first;
    ``numa_id`` is the ``cpu`` it hangs under (``None`` for none).
    """

    bus_id: str
    device_class: str
    vendor: str
    device: str
    link_speed: str
    link_width: int | None
    numa_id: int | None
    switches: tuple[str, ...]
    line: int

    @property
    def rate_GTps(self) -> float | None:
        """Transfer rate per lane, GT/s (``None`` when NCCL wrote none)."""
        match = _GTPS.match(self.link_speed)
        return float(match.group(1)) if match else None

    @property
    def pcie_gen(self) -> int | None:
        """The PCIe generation of its link (``None`` when the speed is not one)."""
        rate = self.rate_GTps
        return None if rate is None else PCIE_GENERATIONS.get(rate)


@dataclass(frozen=True)
class NvLink:
    """An ``nvlink`` element: ``count`` links from one GPU to ``target``."""

    target: str
    count: int
    target_class: str
    line: int

    @property
    def kind(self) -> str:
        """``nvswitch``, ``gpu``, ``cpu`` or ``other``, by :data:`NVLINK_TARGET_CLASSES`."""
        return next((kind for prefix, kind in NVLINK_TARGET_CLASSES
                     if self.target_class.startswith(prefix)), "other")


@dataclass(frozen=True)
class Gpu:
    """A ``gpu`` element with the ``pci`` element around it."""

    dev: int
    sm: int
    rank: int | None
    gdr: bool
    pci: PciDevice
    nvlinks: tuple[NvLink, ...]
    line: int

    @property
    def generation(self) -> str | None:
        """Architecture name by :data:`SM_GENERATIONS` (``None`` for an unknown ``sm``)."""
        return SM_GENERATIONS.get(self.sm)

    @property
    def nvlink_count(self) -> int:
        """NVLinks of this GPU, all targets together."""
        return sum(link.count for link in self.nvlinks)


@dataclass(frozen=True)
class Net:
    """A ``net`` element: one network device (port) NCCL can use; ``speed_Mbps`` in
    Mb/s (10^6 bit/s) as NCCL writes it (``None`` when it wrote none, or 0 or less)."""

    name: str
    dev: int | None
    speed_Mbps: int | None
    port: int | None
    guid: str
    gdr: bool
    line: int

    @property
    def rate_bps(self) -> float | None:
        """Its speed, bit/s."""
        return None if self.speed_Mbps is None else self.speed_Mbps * 1e6


@dataclass(frozen=True)
class Nic:
    """A ``nic`` element: its ``net`` ports, and its ``pci`` device (``None`` for a NIC
    NCCL attached straight to a CPU: a virtual or non-PCI one)."""

    pci: PciDevice | None
    numa_id: int | None
    nets: tuple[Net, ...]
    line: int


@dataclass(frozen=True)
class Cpu:
    """A ``cpu`` element: one NUMA node (NCCL writes one per NUMA node with devices)."""

    numa_id: int
    affinity: str
    arch: str
    vendor: str
    family_id: int | None
    model_id: int | None
    line: int


@dataclass(frozen=True)
class NcclTopology:
    """What one NCCL topology dump says about its host."""

    file: str
    version: int
    cpus: tuple[Cpu, ...]
    switches: tuple[PciDevice, ...]
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]

    @property
    def nets(self) -> tuple[Net, ...]:
        """Every network device (port), NIC by NIC."""
        return tuple(net for nic in self.nics for net in nic.nets)

    def beside(self, nic: Nic) -> tuple[Gpu, ...]:
        """The GPUs under the same innermost PCIe switch as ``nic`` (none when the NIC
        is under no switch)."""
        if nic.pci is None or not nic.pci.switches:
            return ()
        switch = nic.pci.switches[-1]
        return tuple(gpu for gpu in self.gpus
                     if gpu.pci.switches and gpu.pci.switches[-1] == switch)


def read_topology(path: str | Path) -> NcclTopology:
    """Read the NCCL topology dump at ``path``.

    Raises
    ------
    TopologyError
        ``FILE:LINE: <element>: what is wrong``, for the first problem found.
    """
    file = str(path)
    try:
        text = read_input_text(path)
    except OSError as exc:
        raise _error(file, None, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _error(file, None, "", "not UTF-8 text (an NCCL topology dump is"
                     " XML text)") from None
    return parse_topology(text, file=file)


def parse_topology(text: str, *, file: str = "<topology>") -> NcclTopology:
    """Read an NCCL topology dump from ``text`` (see :func:`read_topology`)."""
    root, lines = _parse_xml(text, file)
    reader = _Reader(file, lines)
    if root.tag != "system":
        raise reader.error(root, f"the root element is <{root.tag}>, not <system>: not an"
                           " NCCL topology dump")
    version = reader.integer(root, "version")
    for child in root:
        if child.tag == "cpu":
            reader.cpu(child)
    if not reader.gpus:
        raise reader.error(root, "no <gpu> element: NCCL writes one per GPU it ran on"
                           " (was the dump taken on a GPU node?)")
    return NcclTopology(file, version, tuple(reader.cpus), tuple(reader.switches),
                        tuple(sorted(reader.gpus, key=lambda g: g.dev)), tuple(reader.nics))


def _error(file: str, line: int | None, where: str, message: str) -> TopologyError:
    return TopologyError([Problem(file, line, where, message)])


def _parse_xml(text: str, file: str) -> tuple[ET.Element, dict[int, int]]:
    """The element tree of ``text`` and each element's line (by ``id``), through the
    expat parser xml.etree uses (it keeps no lines itself)."""
    if re.search(r"<!(DOCTYPE|ENTITY)", text):
        # NCCL writes none; refusing them rules out entity expansion and external files
        raise _error(file, text[:text.find("<!")].count("\n") + 1, "",
                     "a <!DOCTYPE> or <!ENTITY> declaration: NCCL writes none, refused")
    builder = ET.TreeBuilder()
    lines: dict[int, int] = {}
    parser = expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        lines[id(builder.start(tag, attrs))] = parser.CurrentLineNumber

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise _error(file, exc.lineno, "", f"not well-formed XML:"
                     f" {expat.ErrorString(exc.code)}") from None
    return builder.close(), lines


class _Reader:
    """The walk over the tree: each element checked and turned into its record."""

    def __init__(self, file: str, lines: dict[int, int]) -> None:
        self.file, self.lines = file, lines
        self.cpus: list[Cpu] = []
        self.switches: list[PciDevice] = []
        self.gpus: list[Gpu] = []
        self.nics: list[Nic] = []

    def line(self, element: ET.Element) -> int:
        return self.lines[id(element)]

    def error(self, element: ET.Element, message: str) -> TopologyError:
        name = element.get("busid") or element.get("name") or element.get("numaid")
        where = f"<{element.tag}>" if name is None else f"<{element.tag} {name}>"
        return _error(self.file, self.line(element), where, message)

    def integer(self, element: ET.Element, key: str) -> int:
        """The integer attribute ``key``, which NCCL always writes."""
        value = self.optional(element, key)
        if value is None:
            raise self.error(element, f"no '{key}' attribute (NCCL always writes it)")
        return value

    def optional(self, element: ET.Element, key: str) -> int | None:
        """The integer attribute ``key``, or ``None`` when absent or empty."""
        value = element.get(key)
        if value is None or value == "":
            return None
        try:
            return int(value, 0)
        except ValueError:
            raise self.error(element, f"{key}={value!r} is not an integer") from None

    def cpu(self, element: ET.Element) -> None:
        numa = self.integer(element, "numaid")
        self.cpus.append(Cpu(numa, element.get("affinity", ""), element.get("arch", ""),
                             element.get("vendor", ""),
                             self.optional(element, "familyid"),
                             self.optional(element, "modelid"),
                             self.line(element)))
        for child in element:
            if child.tag == "pci":
                self.pci(child, numa, ())
            elif child.tag == "nic":
                self.nics.append(Nic(None, numa, self.nets(child), self.line(child)))

    def pci(self, element: ET.Element, numa: int | None, above: tuple[str, ...]) -> None:
        if not element.get("busid"):
            raise self.error(element, "no 'busid' attribute (NCCL always writes it)")
        device = PciDevice(
            element.get("busid", ""), element.get("class", ""), element.get("vendor", ""),
            element.get("device", ""), element.get("link_speed", ""),
            self.optional(element, "link_width"), numa, above,
            self.line(element))
        inner = [child for child in element if child.tag == "pci"]
        if inner:
            self.switches.append(device)
            for child in inner:
                self.pci(child, numa, (*above, device.bus_id))
        for child in element:
            if child.tag == "gpu":
                self.gpus.append(self.gpu(child, device))
            elif child.tag == "nic":
                self.nics.append(Nic(device, numa, self.nets(child), self.line(child)))

    def gpu(self, element: ET.Element, device: PciDevice) -> Gpu:
        links = []
        for child in element:
            if child.tag == "nvlink":
                count = self.integer(child, "count")
                if not count or count < 0 or "tclass" not in child.attrib:
                    raise self.error(child, "an <nvlink> needs a positive 'count' and a"
                                     " 'tclass' (NCCL always writes both)")
                links.append(NvLink(child.get("target", ""), count, child.get("tclass", ""),
                                    self.line(child)))
        dev, sm = self.integer(element, "dev"), self.integer(element, "sm")
        return Gpu(dev, sm, self.optional(element, "rank"),
                   self.optional(element, "gdr") == 1, device, tuple(links),
                   self.line(element))

    def nets(self, element: ET.Element) -> tuple[Net, ...]:
        nets = []
        for child in element:
            if child.tag != "net":
                continue
            if not child.get("name"):
                raise self.error(child, "no 'name' attribute (NCCL always writes it)")
            speed = self.optional(child, "speed")
            nets.append(Net(child.get("name", ""), self.optional(child, "dev"),
                            speed if speed and speed > 0 else None,
                            self.optional(child, "port"),
                            child.get("guid", ""),
                            self.optional(child, "gdr") == 1,
                            self.line(child)))
        return tuple(nets)
