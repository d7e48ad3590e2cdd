from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from topomodel.cli.parser import build_parser, named_verb
from topomodel.cli.shared import flag_of
from topomodel.errors import InputError, ParameterError, TopomodelError, short_words
from topomodel.files import refuse_output_folder
from topomodel.inputs.units import keep_unit_answers, pint_for_scalars_only
from topomodel.report.output import FILE_FORMATS, Report, refuse_nonfinite, render, write_tables

EXIT_INPUT_ERROR = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status.

    A SIGTERM or SIGHUP ends it as an exception would, so temporary files are removed,
    sweep workers stopped and finished points kept, as on Ctrl-C. Called as the program
    (``argv`` None: ``python -m topomodel`` and the ``topomodel`` script, whose process
    ends when this returns), it leaves its objects to the process's end
    (:func:`_leave_objects_to_exit`) and keeps the memory it frees for reuse
    (:func:`~topomodel.heap.keep_freed_memory`)."""
    if argv is None:
        from topomodel.heap import keep_freed_memory

        keep_freed_memory()
    previous = _exit_on_termination()
    try:
        return _main(argv)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if argv is None:
            _leave_objects_to_exit()


def _leave_objects_to_exit() -> None:
    """Move every object alive now out of the cyclic garbage collector's reach
    (:func:`gc.freeze`), so the interpreter's shutdown does not walk them again in the
    collections it runs while it unloads ~800 modules. That walk was 0.13-0.2 CPU s of a
    4,096-GPU ``route`` (0.6-0.75 s in all; ``benchmarks/bench_startup.py``), spent
    finding no garbage: what is left at exit is the modules and the results, freed by
    reference counting as they unload; ``atexit`` handlers (temporary folders, worker
    pools) still run."""
    import gc

    gc.freeze()


def _exit_on_termination() -> dict[int, Any]:
    """Make SIGTERM and SIGHUP raise SystemExit (128 + signal) where they would kill the
    process outright; return the handlers replaced."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, leave)
    return previous


def _main(argv: Sequence[str] | None) -> int:
    pint_for_scalars_only()
    keep_unit_answers()
    parser = build_parser(only=named_verb(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], Report] = args.run
    directory = tables_directory(args)
    if args.format == "parquet" and directory is None and not getattr(
            args, "writes_parquet", False):  # refused before any work
        where = ("give the directory with -o DIR" if hasattr(args, "tables_dir") else
                 f"{args.verb} has no table directory (its -o is its own output): use"
                 " --format csv")
        print(f"topomodel: error: --format parquet writes one file per table: {where}",
              file=sys.stderr)
        return EXIT_INPUT_ERROR
    caught: list[warnings.WarningMessage] = []
    try:
        if args.format in FILE_FORMATS and directory is not None:
            refuse_output_folder(directory)  # before any work
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            report = run(args)
        _show_warnings(caught)  # as they would have been: the run succeeded
        refuse_nonfinite(report)
        if args.format in FILE_FORMATS and directory is not None:
            text = "\n".join(f"wrote {path}" for path in
                             write_tables(report, args.format, directory))
        else:
            text = render(report, args.format)
    except InputError as exc:
        _show_warnings(caught, numeric=False)
        for problem in exc.problems:
            print(short_words(f"topomodel: error: {problem}"), file=sys.stderr)
        return EXIT_INPUT_ERROR
    except TopomodelError as exc:
        _show_warnings(caught, numeric=False)
        said = (f"{flag_of(exc.parameter)}: {exc.message}" if isinstance(exc, ParameterError)
                else str(exc))
        print(short_words(f"topomodel: error: {said}{_numeric_notes(caught)}"),
              file=sys.stderr)
        return EXIT_INPUT_ERROR
    except OSError as exc:  # an output path that cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(short_words(f"topomodel: error: {where}cannot write: {exc.strerror or exc}"),
              file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `topomodel ... | head` closed the pipe: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes
    return 0


def _numeric_notes(caught: Sequence[warnings.WarningMessage]) -> str:
    """numpy's RuntimeWarnings (overflow, division by zero) as a note folded into the
    error line they led to, each once."""
    notes = dict.fromkeys(str(w.message) for w in caught
                          if issubclass(w.category, RuntimeWarning))
    return f" (numpy: {'; '.join(notes)})" if notes else ""


def _show_warnings(caught: Sequence[warnings.WarningMessage], *, numeric: bool = True
                   ) -> None:
    """Show the warnings a run recorded, as Python would have; the RuntimeWarnings only
    when ``numeric`` (an error line folds them in instead)."""
    for w in caught:
        if numeric or not issubclass(w.category, RuntimeWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def tables_directory(args: argparse.Namespace) -> str | None:
    """Where ``--format csv|parquet`` writes one file per table: ``-o DIR`` of a verb
    whose output is its tables, ``DIR/tables`` of the review (its ``-o`` is the report
    directory), else None (CSV to standard output; Parquet refused)."""
    if getattr(args, "tables_dir", None):
        return str(args.tables_dir)
    if getattr(args, "tables_under_output", False) and getattr(args, "output", None):
        return os.path.join(args.output, "tables")
    return None
