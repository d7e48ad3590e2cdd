"""Command-line flags of the step options, generated from
:data:`topomodel.analysis.options.OPTIONS`, and the values they give, checked by the
same readers as sweep files (a refused value names its flag)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from topomodel.analysis.options import (
    GOODPUT_OPTIONS,
    OPTIONS,
    SERVE_OPTIONS,
    STEP_OPTIONS,
    StepInputs,
    StepOption,
    step_inputs,
)
from topomodel.errors import UsageError
from topomodel.inputs.records import Invalid, Reading
from topomodel.inputs.yamlsource import Source

FABRIC_OPTIONS = ("routing", "seed", "fail", "fail_domain", "scaleout_factor", "overhead",
                  "efficiency", "protocol", "pxn", "measured_curves")
"""The options of verbs that run collectives without a model (route, draw)."""

DECODE_KEYS = ("model", "tp", "ep", "dp", "compute_efficiency", "hbm_efficiency")
"""Step options the decode verb shares with the step (same flags, readers and help),
besides decode's own (:data:`~topomodel.analysis.options.DECODE_OPTIONS`)."""
SERVE_JOB = (*SERVE_OPTIONS, "dtype", "kv_dtype", "activation_dtype", "comm_overlap")
"""A serving job's options besides the step's: serving's own
(:data:`~topomodel.analysis.options.SERVE_OPTIONS`) and decode's data types and overlap
(``serve`` and ``compare --serve``)."""
SERVE_KEYS = ("model", "compute_efficiency", "hbm_efficiency")
"""Step options the serve verb shares with the step (same flags, readers and help)."""
_READING = Reading(Source("<command line>", ""))
_ARG_TYPES: dict[str, Any] = {"int": int, "float": float, "text": str, "list": str}


def _pair(text: str) -> tuple[str, float]:
    """``NAME=F`` as (name, number); the number is checked by the option's reader."""
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not name or number != number:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}")
    return name, number


def _help(opt: StepOption) -> str:
    shown = {"true": "on", "false": "off"}.get(opt.default_text(), opt.default_text())
    if opt.arg in ("pairs", "list"):
        shown = ""
    repeat = "; repeatable" if opt.arg in ("pairs", "list") else ""
    return opt.doc.replace("%", "%%") + (f" (default {shown}{repeat})" if shown else
                                         f" ({repeat[2:]})" if repeat else "")


def add_step_options(parser: argparse.ArgumentParser,
                     keys: Sequence[str] | None = None, *, model_required: bool = True
                     ) -> None:
    """Add the flags of the options ``keys`` (default: all) to ``parser``.

    Every flag defaults to ``None`` (not given), so :func:`inputs_from_args` passes on
    only what the user wrote and the option's own default applies otherwise.
    """
    for key in keys or STEP_OPTIONS:
        opt = OPTIONS[key]
        names = [opt.flag]
        kwargs: dict[str, Any] = {"dest": opt.key, "default": None, "help": _help(opt)}
        if opt.key == "model":
            kwargs.update(required=model_required, metavar=opt.metavar)
        elif opt.arg == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif opt.arg == "pairs":
            kwargs.update(action="append", type=_pair, metavar=opt.metavar)
        elif opt.arg == "list":
            kwargs.update(action="append", metavar=opt.metavar)
        else:
            kwargs.update(type=_ARG_TYPES[opt.arg], metavar=opt.metavar or "N")
            if opt.arg == "text" and opt.key in ("grad_precision", "main_grad_precision", "routing",
                                                 "protocol"):
                kwargs.pop("metavar")
        parser.add_argument(*names, **kwargs)


def given_values(args: argparse.Namespace, keys: Sequence[str] | None = None
                 ) -> dict[str, Any]:
    """The step option values the command line gave, by key (pairs as a mapping)."""
    out: dict[str, Any] = {}
    for key in keys or OPTIONS:
        value = getattr(args, key, None)
        if value is None:
            continue
        out[key] = dict(value) if OPTIONS[key].arg == "pairs" else (
            list(value) if OPTIONS[key].arg == "list" else value)
    return out


def inputs_from_args(args: argparse.Namespace, keys: Sequence[str] | None = None, *,
                     require_model: bool = True) -> StepInputs:
    """:class:`StepInputs` from the parsed flags.

    Raises
    ------
    UsageError
        ``--flag: what is wrong`` for the first refused value.
    """
    values = given_values(args, keys)
    try:
        return step_inputs(values, require_model=require_model)
    except Invalid as exc:
        key = str(exc.key) if exc.key is not None else ""
        flag = OPTIONS[key].flag if key in OPTIONS else key
        raise UsageError(f"{flag}: {exc.message}" if flag else exc.message) from None


def add_serve_options(parser: argparse.ArgumentParser, *, switch: bool = False) -> None:
    """Add a serving job's flags (:data:`SERVE_JOB` and ``--trace``); with ``switch``
    also ``--serve``, which turns them on (``compare --serve``)."""
    if switch:
        parser.add_argument("--serve", action="store_true", help="compare a serving job"
                            " (the serve flags below; docs/serve.md) instead of a step")
    parser.add_argument("--trace", metavar="FILE", help="request trace, Mooncake JSONL"
                        " (timestamp ms, input_length, output_length): lengths and rate")
    add_step_options(parser, SERVE_JOB)


def add_goodput_options(parser: argparse.ArgumentParser) -> None:
    """Add the goodput model's flags (step, goodput, review): the options table's
    :data:`~topomodel.analysis.options.GOODPUT_OPTIONS`."""
    add_step_options(parser, GOODPUT_OPTIONS)


def goodput_from_args(args: argparse.Namespace) -> Any:
    """GoodputAssumptions from the goodput flags (defaults for those not given).

    Raises
    ------
    UsageError
        ``--flag: what is wrong`` for a refused value.
    """
    return inputs_from_args(args, GOODPUT_OPTIONS, require_model=False).goodput
