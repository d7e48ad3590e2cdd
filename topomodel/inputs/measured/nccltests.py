"""Read the output of NVIDIA's nccl-tests (``all_reduce_perf`` and its siblings).

The layout read is the one nccl-tests prints (``src/common.cu``): a parameter line
``# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) ...``, the
``# Using devices`` block with one ``#  Rank  r Group g Pid p on HOST device d [bus] NAME``
line per rank (gathered from every process under MPI), a two-line column header
(``out-of-place`` / ``in-place`` over ``size count type redop root time algbw busbw
#wrong``, then a units line), one row per size, and the footer ``# Out of bounds values``
/ ``# Avg bus bandwidth``. Older releases print no ``Group`` and no ``root`` (or no
``redop``) column and an ``error`` column (``0e+00`` or ``N/A``); the column header says
which columns there are, and it is what the rows are read by. The command line and the
``NCCL_ALGO``/``NCCL_PROTO`` settings are read by :mod:`topomodel.inputs.measured.nccllaunch`;
other lines that are not part of the table (``NCCL INFO`` debug output, warnings) are
passed over, and
``mpirun --tag-output`` prefixes (``[1,0]<stdout>:``) are removed.

Times are printed in microseconds and bandwidths in GB/s (10^9 bytes/s); the records
here hold seconds and bytes/s. ``size`` is ``max(send bytes, receive bytes)`` per rank, the
convention of :data:`topomodel.analysis.collectives.collective.SIZE_CONVENTIONS`.

A log that cannot be read (no table, a row that is cut off or garbled, two runs mixed in
one file) raises :class:`LogError` naming the file and line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topomodel.errors import InputError, Problem
from topomodel.inputs.measured.nccllaunch import Launch, read_launch

TESTS = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather",
         "reduce_scatter_perf": "reducescatter", "alltoall_perf": "alltoall",
         "sendrecv_perf": "sendrecv", "broadcast_perf": "broadcast",
         "reduce_perf": "reduce"}
"""nccl-tests binaries read here, and the collective each runs (as the model names it)."""

WORD_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1,
              "fp8_e5m2": 1, "half": 2, "float16": 2, "bfloat16": 2, "int32": 4,
              "uint32": 4, "int": 4, "float": 4, "float32": 4, "int64": 8, "uint64": 8,
              "double": 8, "float64": 8}
"""Bytes per element of each data type name nccl-tests prints."""

_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+"
                   r"device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$")
_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)"
                     r"\s+step:\s*(\d+)\((factor|bytes)\)")
_TEST_NAME = re.compile(r"\b(" + "|".join(TESTS) + r")\b")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)")
_TIME_WORDS = ("time", "cputime")
_ERROR_WORDS = ("#wrong", "error", "res", "wrong")


class LogError(InputError):
    """An nccl-tests log that cannot be read."""


def _problem(file: str, line: int | None, message: str) -> LogError:
    return LogError([Problem(file, line, "", message)])


@dataclass(frozen=True)
class RankPlace:
    """Where one rank ran: its host name and CUDA device, as the log's device lines say."""

    rank: int
    host: str
    device: int
    bus_id: str
    device_name: str


@dataclass(frozen=True)
class Timing:
    """One column group of a row (out-of-place or in-place): seconds and bytes/s."""

    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    wrong: float | None  # elements that failed validation; None when not checked


@dataclass(frozen=True)
class ResultRow:
    """One size of the table, with the line it was read from (1-based)."""

    line: int
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Timing
    in_place: Timing | None


@dataclass(frozen=True)
class NcclTestsLog:
    """What an nccl-tests log says: the run's ranks, parameters and result rows."""

    file: str
    test: str | None  # the binary the log names (all_reduce_perf, ...), if it names one
    ranks: tuple[RankPlace, ...]
    threads: int | None
    gpus_per_thread: int | None
    min_bytes: int | None
    max_bytes: int | None
    step: str | None  # '2(factor)' or '1048576(bytes)'
    header_line: int
    rows: tuple[ResultRow, ...]
    out_of_bounds: int | None  # the footer's count; None without a footer
    average_busbw_Bps: float | None
    warnings: tuple[str, ...]
    launch: Launch = field(default_factory=Launch)  # its command line and NCCL_* lines
    cycles: tuple[tuple[ResultRow, ...], ...] = ()  # the sweeps after the first (-N k)

    @property
    def all_rows(self) -> tuple[ResultRow, ...]:
        """Every row of every cycle (``rows`` is the first cycle's)."""
        return self.rows + tuple(r for cycle in self.cycles for r in cycle)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Host names in the order their first rank appears."""
        return tuple(dict.fromkeys(place.host for place in self.ranks))


@dataclass(frozen=True)
class _Layout:
    """The columns the header announces: the row prefix, then timing groups."""

    prefix: tuple[str, ...]  # e.g. size count type redop root
    groups: int  # 1 (out-of-place only) or 2
    with_error: bool

    @property
    def width(self) -> int:
        return len(self.prefix) + self.groups * (4 if self.with_error else 3)


def _layout(words: Sequence[str], file: str, line: int) -> _Layout:
    names = ["size" if w == "bytes" else w for w in words]
    first_time = next(i for i, w in enumerate(names) if w in _TIME_WORDS)
    prefix = tuple(names[:first_time])
    rest = names[first_time:]
    groups = sum(1 for w in rest if w == "busbw")
    with_error = any(w in _ERROR_WORDS for w in rest)
    if (prefix[:2] != ("size", "count") and prefix[:2] != ("size", "N")) or groups not in (
            1, 2) or len(rest) != groups * (4 if with_error else 3):
        raise _problem(file, line, "a column header nccl-tests does not print: "
                       + " ".join(words))
    return _Layout(prefix, groups, with_error)


def _number(text: str) -> float:
    value = float(text)
    if math.isnan(value):
        raise ValueError(text)
    return value


def _timing(words: Sequence[str], with_error: bool) -> Timing:
    time_us, algbw, busbw = (_number(w) for w in words[:3])
    wrong: float | None = None
    if with_error and words[3] not in ("N/A", "-1"):
        wrong = float(words[3])
    return Timing(time_us * 1e-6, algbw * 1e9, busbw * 1e9, wrong)


def _row(words: Sequence[str], layout: _Layout, line: int) -> ResultRow:
    """One result row; ``ValueError`` when a field is not what its column holds."""
    fields = dict(zip(layout.prefix, words, strict=False))
    size, count = int(words[0]), int(words[1])
    redop = fields.get("redop", fields.get("op"))
    root = int(fields["root"]) if "root" in fields else None
    n = len(layout.prefix)
    step = 4 if layout.with_error else 3
    out = _timing(words[n:n + step], layout.with_error)
    inside = (_timing(words[n + step:n + 2 * step], layout.with_error)
              if layout.groups == 2 else None)
    return ResultRow(line, size, count, fields.get("type", "?"), redop, root, out, inside)


def read_nccl_tests(path: str | Path) -> NcclTestsLog:
    """Read an nccl-tests log file.

    Raises
    ------
    LogError
        ``FILE:LINE: what is wrong`` for a log with no result table, a row cut short or
        garbled, a second table, or sizes repeated (two runs in one file).
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _problem(file, None, f"cannot read: {exc.strerror or exc}") from None
    return parse_nccl_tests(text, file=file)


# C901: one pass over a log's lines; each branch is one line kind
def parse_nccl_tests(text: str, *, file: str = "<log>") -> NcclTestsLog:  # noqa: C901
    """Read nccl-tests output from ``text`` (see :func:`read_nccl_tests`).

    Examples
    --------
    >>> log = parse_nccl_tests('''
    ... #       size   count  type redop root  time  algbw  busbw #wrong  time  algbw  busbw #wrong
    ... #        (B) (elements)              (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
    ...    1048576  262144 float   sum   -1 100.0  10.49  15.73      0  99.0  10.59  15.89     0
    ... ''')
    >>> row = log.rows[0]
    >>> row.size_bytes, round(row.out_of_place.time_s * 1e6, 6), row.in_place.busbw_Bps
    (1048576, 100.0, 15890000000.0)
    """
    ranks: list[RankPlace] = []
    rows: list[ResultRow] = []
    warnings: list[str] = []
    params: tuple[int, int, int, int, str] | None = None
    tests: dict[str, int] = {}
    layout: _Layout | None = None
    header_line = 0
    out_of_bounds: int | None = None
    average: float | None = None
    lines = text.splitlines()
    last_data = max((i for i, raw in enumerate(lines, 1)
                     if _PREFIX.sub("", raw).split()[:1]
                     and _PREFIX.sub("", raw).split()[0].isdigit()), default=0)
    for number, raw in enumerate(lines, 1):
        line = _PREFIX.sub("", raw).strip()
        if not line:
            continue
        for name in _TEST_NAME.findall(line):
            tests.setdefault(name, number)
        if line.startswith("#"):
            words = line[1:].split()
            if (found := _RANK.match(line)) is not None:
                ranks.append(RankPlace(int(found[1]), found[2], int(found[3]), found[4],
                                       found[5].strip()))
            elif (found := _PARAMS.search(line)) is not None:
                params = (int(found[1]), int(found[2]), int(found[3]), int(found[4]),
                          f"{found[5]}({found[6]})")
            elif "busbw" in words and any(w in _TIME_WORDS for w in words):
                if layout is not None:
                    raise _problem(file, number, f"a second result table (the first starts"
                                   f" at line {header_line}): one nccl-tests run per log;"
                                   " split the file")
                layout, header_line = _layout(words, file, number), number
            elif (found := _OUT_OF_BOUNDS.match(line)) is not None:
                out_of_bounds = int(found[1])
            elif (found := _AVERAGE.match(line)) is not None:
                average = float(found[1]) * 1e9
            continue
        words = line.split()
        if not words[0].isdigit():
            continue  # NCCL INFO/WARN lines, the command line, banners
        if layout is None:
            raise _problem(file, number, "a result row before the column header"
                           " ('#  size  count  type ... busbw'): is the header cut off?")
        if len(words) < layout.width:
            cut = number == last_data and out_of_bounds is None
            raise _problem(file, number, (
                f"truncated: the last result row has {len(words)} of {layout.width}"
                " columns (the log was cut off mid-row)") if cut else (
                f"malformed result row: {len(words)} of {layout.width} columns"))
        if len(words) > layout.width:
            raise _problem(file, number, f"malformed result row: {len(words)} columns, the"
                           f" header at line {header_line} has {layout.width}")
        try:
            rows.append(_row(words, layout, number))
        except ValueError:
            raise _problem(file, number, "malformed result row: a field is not a number"
                           f" where its column needs one: {line}") from None
    if layout is None:
        raise _problem(file, None, "no nccl-tests result table: no column header line"
                       " ('#  size  count  type ... time  algbw  busbw') was found")
    if not rows:
        raise _problem(file, header_line, "no result rows after the column header: the run"
                       " stopped (or the log was cut) before its first size")
    launch = read_launch([_PREFIX.sub("", raw) for raw in lines])
    rows, cycles = split_cycles(rows, launch.run_cycles, file)
    check_rows(rows, file)
    names = sorted(tests, key=tests.__getitem__)
    if len({TESTS[n] for n in names}) > 1:
        raise _problem(file, tests[names[1]], f"the log names more than one test"
                       f" ({', '.join(names)}): one nccl-tests run per log")
    if out_of_bounds is None:
        warnings.append("no '# Out of bounds values' footer: the run may have stopped"
                        f" early (the last row read is {rows[-1].size_bytes} bytes)")
    elif out_of_bounds:
        warnings.append(f"{out_of_bounds} results failed nccl-tests' validation: the"
                        " measured times may not be of correct runs")
    wrong = [r.size_bytes for r in rows if any(
        t is not None and t.wrong for t in (r.out_of_place, r.in_place))]
    if wrong and not out_of_bounds:
        warnings.append(f"{len(wrong)} sizes have wrong elements (#wrong > 0), first at"
                        f" {wrong[0]} bytes")
    warnings += launch.conflicts
    threads, gpus, low, high, step = params if params else (None, None, None, None, None)
    return NcclTestsLog(file, names[0] if names else None, tuple(ranks), threads, gpus, low,
                        high, step, header_line, tuple(rows), out_of_bounds, average,
                        tuple(warnings), launch, cycles)


def split_cycles(rows: list[ResultRow], run_cycles: int, file: str
                 ) -> tuple[list[ResultRow], tuple[tuple[ResultRow, ...], ...]]:
    """The first size sweep and the ones after it, for a run whose command line gives
    ``-N`` (``run_cycles`` > 1: nccl-tests prints the whole sweep again each cycle);
    otherwise the rows as they are (:func:`check_rows` refuses repeated sizes).

    Raises
    ------
    LogError
        When a later cycle's sizes are not the first's (a cut-off log keeps the cycles
        before the cut, which it then names).
    """
    if run_cycles == 1 or len(rows) < 2:
        return rows, ()
    starts = [0] + [i for i in range(1, len(rows))
                    if rows[i].size_bytes <= rows[i - 1].size_bytes]
    sweeps = [rows[a:b] for a, b in zip(starts, [*starts[1:], len(rows)], strict=True)]
    first = [r.size_bytes for r in sweeps[0]]
    for sweep in sweeps[1:]:
        if [r.size_bytes for r in sweep] != first:
            raise _problem(file, sweep[0].line, f"a -N cycle (from line {sweep[0].line})"
                           " has other sizes than the first: the log was cut off or mixes"
                           " runs; keep whole cycles")
    return sweeps[0], tuple(tuple(s) for s in sweeps[1:])


def check_rows(rows: Sequence[ResultRow], file: str) -> None:
    """Refuse rows of two runs mixed in one file (a size twice, several data types)."""
    kinds = dict.fromkeys((r.dtype, r.redop) for r in rows)
    if len(kinds) > 1:
        shown = ", ".join(f"{t}/{o}" if o else t for t, o in kinds)
        other = next(r for r in rows if (r.dtype, r.redop) != (rows[0].dtype, rows[0].redop))
        raise _problem(file, other.line, f"rows of more than one data type or reduction"
                       f" ({shown}), as with -d all or -o all: give one per log")
    seen: dict[int, int] = {}
    for row in rows:
        if row.size_bytes in seen:
            raise _problem(file, row.line, f"size {row.size_bytes} appears twice (lines"
                           f" {seen[row.size_bytes]} and {row.line}): two runs or processes"
                           " printed into one log; split it")
        seen[row.size_bytes] = row.line
