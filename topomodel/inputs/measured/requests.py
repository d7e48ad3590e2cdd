"""A request trace in Mooncake's JSONL format: one request a line, its arrival time and
its input and output lengths.

Mooncake (FAST '25, ``github.com/kvcache-ai/Mooncake``, ``FAST25-release/traces``) and
the tools that replay its traces (NVIDIA Dynamo's data generator, AIPerf's
``mooncake_trace``) write one JSON object a line::

    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}

``timestamp`` is the arrival in milliseconds since the first request (several requests
may share one), ``input_length`` and ``output_length`` are tokens, ``hash_ids`` name the
prompt's KV blocks for prefix reuse (read, not used: prefix caching is not modelled).
Other keys are ignored. Blank lines are skipped.

Examples
--------
>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
>>> _ = path.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\\n'
...                     '{"timestamp": 500, "input_length": 300, "output_length": 30}\\n')
>>> trace = read_mooncake_trace(path)
>>> trace.requests, trace.rate_rps, trace.input_tokens.tolist()
(2, 2.0, [100, 300])
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from topomodel.errors import InputError, Problem

FIELDS = ("timestamp", "input_length", "output_length")
"""The keys every request of a trace has."""


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """Requests read from a trace: arrival seconds, input and output tokens, per row."""

    file: str
    arrival_s: np.ndarray  # float64, from the first request
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64

    @property
    def requests(self) -> int:
        """Requests in the trace."""
        return len(self.arrival_s)

    @property
    def rate_rps(self) -> float | None:
        """Mean arrival rate, requests/s: arrivals after the first over the time they
        span; ``None`` when every request arrives at once (no rate to read)."""
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return (self.requests - 1) / span if span > 0 else None


def read_mooncake_trace(path: str | Path) -> RequestTrace:
    """The requests of a Mooncake-format JSONL trace (the module docstring's format).

    Raises
    ------
    InputError
        One line naming the file, the line and the key: a line that is not a JSON
        object, a missing field, a length below 1, a timestamp that is negative, not a
        number or earlier than the line before, or a trace without requests.
    """
    name = str(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem(name, None, "", f"cannot read the trace: {exc}")]) from None
    arrival: list[float] = []
    lengths: list[tuple[int, int]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = _row(name, number, line)
        if arrival and row[0] < arrival[-1]:
            raise InputError([Problem(name, number, "timestamp",
                                      f"{row[0]:g} ms is earlier than the line before"
                                      f" ({arrival[-1]:g} ms); a trace is in arrival order")])
        arrival.append(row[0])
        lengths.append((row[1], row[2]))
    if not arrival:
        raise InputError([Problem(name, None, "", "no requests in the trace")])
    sizes = np.array(lengths, dtype=np.int64)
    times = np.array(arrival) / 1e3
    return RequestTrace(name, times - times[0], sizes[:, 0], sizes[:, 1])


def _row(name: str, number: int, line: str) -> tuple[float, int, int]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError([Problem(name, number, "", f"not JSON: {exc.msg}")]) from None
    if not isinstance(row, dict):
        raise InputError([Problem(name, number, "", "expected a JSON object a line")])
    for key in FIELDS:
        if key not in row:
            raise InputError([Problem(name, number, key, "missing")])
    stamp = row["timestamp"]
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not (
            math.isfinite(stamp) and stamp >= 0):
        raise InputError([Problem(name, number, "timestamp",
                                  f"expected milliseconds from 0, got {stamp!r}")])
    out = []
    for key in FIELDS[1:]:
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError([Problem(name, number, key,
                                      f"expected a whole number of tokens from 1, got"
                                      f" {value!r}")])
        out.append(value)
    return float(stamp), out[0], out[1]
