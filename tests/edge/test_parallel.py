"""Independent work on every core: the pool gives the serial loop's results, in order,
and errors as the loop raises them; each verb that uses it prints the same either way."""

import json
import os
import sys
from pathlib import Path

import pytest

from topomodel.analysis.reliability.goodput import job_goodput, step_and_goodput
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.studies import sensitivity
from topomodel.cli import main
from topomodel.errors import DesignError, Problem, UnitError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.parallel import (
    beside,
    can_fork,
    check_workers,
    default_workers,
    parallel_map,
    parallel_map_then,
)
from topomodel.traffic.layout import Layout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
forks = pytest.mark.skipif(not can_fork(), reason="no forked workers on this platform")


def _pid(_: object) -> int:
    return os.getpid()


def test_results_come_back_in_item_order():
    items = list(range(23))
    assert parallel_map(lambda x: x * x - 3, items, workers=3) == [x * x - 3 for x in items]
    assert parallel_map(str, [], workers=2) == []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count())
    assert default_workers() == cores
    assert check_workers(None) == default_workers()


@forks
def test_pieces_run_in_other_processes_unless_one_worker_is_asked_for():
    assert set(parallel_map(_pid, range(4), workers=1)) == {os.getpid()}
    assert os.getpid() not in parallel_map(_pid, range(4), workers=2)
    # a piece that maps again runs its own pieces in its worker: no pools in pools
    inner = parallel_map(lambda _: set(parallel_map(_pid, range(3), workers=2)), [0, 1],
                         workers=2)
    assert all(len(pids) == 1 and os.getpid() not in pids for pids in inner)


def _pids_below(_: int) -> tuple[int, list[int], list[str]]:
    """This worker's pid, its own pieces' pids, and its pieces run after them."""
    mine = parallel_map(_pid, range(3), workers=2)
    return os.getpid(), mine, parallel_map(str, [7, 8], workers=2)


@forks
def test_nested_pieces_open_pools_of_their_own_and_keep_their_order():
    outer = parallel_map(_pids_below, range(3), workers=2, nested=True)
    for worker, inner, after in outer:
        assert worker != os.getpid() and worker not in inner and len(set(inner)) >= 1
        assert after == ["7", "8"]  # the worker's own work is intact after its pool
    # every worker ran at least one pool of processes besides itself
    assert all(set(inner) - {worker} for worker, inner, _ in outer)
    assert parallel_map(lambda x: x + 1, [1, 2, 3], workers=2) == [2, 3, 4]  # after


def _warm_pids(_: int) -> tuple[int, list[int]]:
    """This worker's pid and its own pieces' pids, the first warmed here."""
    return os.getpid(), parallel_map(_pid, range(3), workers=2, warm_first=True)


@forks
def test_warm_first_runs_the_first_item_itself_before_forking():
    for worker, inner in parallel_map(_warm_pids, range(2), workers=2, nested=True):
        assert inner[0] == worker and worker not in inner[1:]
    # at the top too: the workers start from what the first item built
    alone = parallel_map(_pid, range(3), workers=2, warm_first=True)
    assert alone[0] == os.getpid() and os.getpid() not in alone[1:]
    assert os.getpid() not in parallel_map(_pid, range(3), workers=2)


def test_work_beside_runs_in_another_thread_while_the_body_runs():
    import threading

    started, body_done = threading.Event(), threading.Event()
    seen = []

    def work():
        started.set()
        seen.append(threading.current_thread() is not threading.main_thread())
        assert body_done.wait(10)  # still running when the body ends: waited for

    with beside(work):
        assert started.wait(10)
        body_done.set()
    assert seen == [True]


def test_work_beside_raises_its_error_on_leaving_unless_the_body_raised():
    def work():
        raise ValueError("view")

    with pytest.raises(ValueError, match="view"), beside(work):
        pass
    with pytest.raises(KeyError, match="body"), beside(work):
        raise KeyError("body")


def test_workers_below_one_are_refused():
    with pytest.raises(UsageError, match="--workers must be at least 1, got 0"):
        parallel_map(str, [1, 2], workers=0)


def _fail_on_odd(x: int) -> int:
    if x % 2:
        raise DesignError([Problem("d.yaml", x, "systems", f"bad {x}")])
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_the_first_error_in_item_order_is_raised_as_it_was(workers):
    with pytest.raises(DesignError) as caught:
        parallel_map(_fail_on_odd, [0, 2, 3, 4, 5], workers=workers)
    assert caught.value.problems == (Problem("d.yaml", 3, "systems", "bad 3"),)
    assert str(caught.value) == "d.yaml:3: systems: bad 3"

    def unit(_: int) -> int:
        raise UnitError("7", "a bare number")

    with pytest.raises(UnitError, match="'7': a bare number"):
        parallel_map(unit, [1, 2], workers=workers)


@pytest.fixture(scope="module")
def superpod():
    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    fabric = build_fabric(design, catalog)
    return fabric, catalog.get("llama3-8b", Model), Layout(tp=8, pp=2, dp=63)


def test_sensitivity_on_workers_is_the_serial_one(superpod):
    fabric, model, layout = superpod
    serial = sensitivity(fabric, model, layout, workers=1)
    # a fresh fabric: the workers start from the base step's times, not the serial run's
    again = build_fabric(fabric.design, fabric.catalog)
    assert sensitivity(again, model, layout, workers=2) == serial
    assert len(serial) == 6 and len({r.base for r in serial}) == 1


def test_goodput_on_workers_is_the_serial_one(superpod):
    fabric, model, layout = superpod
    quiet = StepAssumptions(jitter_cv=0.0)
    result = step_time(fabric, model, layout, quiet)
    serial = job_goodput(fabric, model, layout, quiet, result, workers=1)
    parallel = job_goodput(build_fabric(fabric.design, fabric.catalog), model, layout,
                           quiet, result, workers=2)
    assert serial.degraded_routed and len(serial.degraded_loss) >= 2
    assert parallel.degraded_loss == serial.degraded_loss
    assert list(parallel.degraded_loss) == list(serial.degraded_loss)  # same order
    assert parallel == serial


@pytest.mark.parametrize("workers", [1, 2])
def test_the_step_run_beside_the_degraded_steps_is_the_step_run_before(superpod,
                                                                      workers):
    fabric, model, layout = superpod
    quiet = StepAssumptions(jitter_cv=0.0)
    before = step_time(fabric, model, layout, quiet)
    alone = job_goodput(fabric, model, layout, quiet, before, workers=1)
    fresh = build_fabric(fabric.design, fabric.catalog)  # nothing routed on it yet
    step, good = step_and_goodput(fresh, model, layout, quiet, workers=workers)
    assert step == before and good == alone and good.degraded_routed


def _cli_json(capsys, *argv):
    status = main([*argv, "--format", "json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("verb", ["compare", "step", "goodput"])
def test_cli_output_is_the_same_with_one_worker_or_several(capsys, verb):
    design = str(EXAMPLES / "dgx-h100-superpod.yaml")
    job = ["--model", "llama3-8b", "--tp", "8", "--pp", "2"]
    argv = {"compare": ["compare", design, str(EXAMPLES / "selene-dgx-a100.yaml"), *job],
            "step": ["step", design, *job, "--sensitivity"],
            "goodput": ["goodput", design, *job]}[verb]
    one = _cli_json(capsys, *argv, "--workers", "1")
    assert _cli_json(capsys, *argv, "--workers", "2") == one
    assert _cli_json(capsys, *argv) == one  # the default: every core


def test_a_worker_error_is_one_line_with_status_2(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("system: dgx-h100\nsystems: 0\n")
    status = main(["compare", str(EXAMPLES / "dgx-h100-superpod.yaml"), str(bad),
                   "--model", "llama3-8b", "--tp", "8", "--workers", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert err.startswith(f"topomodel: error: {bad}:2: systems") and err.count("\n") == 1
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        main(["goodput", str(EXAMPLES / "dgx-h100-superpod.yaml"), "--model", "llama3-8b",
              "--workers", "0"])
    assert usage.value.code == 2
    assert "--workers: expected a whole number of at least 1" in capsys.readouterr().err


def test_review_on_workers_is_the_serial_one():
    from topomodel.report.review import collect_review

    design, catalog = load_design(EXAMPLES / "selene-dgx-a100.yaml")
    model, layout = catalog.get("llama3-8b", Model), Layout(tp=8, dp=16)

    def review(workers):
        fabric = build_fabric(design, catalog)
        data = collect_review(fabric, model=model, layout=layout, workers=workers).data
        data["inputs"].pop("generated_utc")
        return data

    serial = review(1)
    assert len(serial["collectives"]["rows"]) >= 10 and serial["collectives"]["featured"]
    assert review(2) == serial


@forks
def test_an_error_ends_the_pieces_still_running():
    import time

    def piece(x: int) -> int:
        if x == 0:
            raise UsageError("first")
        time.sleep(60)  # would hold the caller for a minute if it were waited for
        return x

    start = time.monotonic()
    with pytest.raises(UsageError, match="first"):
        parallel_map(piece, [0, 1, 2], workers=3)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_planned_pieces_come_back_as_the_serial_loop_gives_them(workers):
    seen: list[list[int]] = []

    def plan(first: list[int]) -> list[tuple[int, int]]:
        seen.append(first)
        return [(k, sum(first)) for k in range(5)]

    items = list(range(9))
    done, planned = parallel_map_then(lambda x: x * x, items, lambda kv: kv[0] * kv[1],
                                      plan, ready=3, workers=workers)
    assert seen == [[0, 1, 4]]  # the first results only, once
    assert done == [x * x for x in items] and planned == [k * 5 for k in range(5)]
    # no first items: planned at once; nothing planned: the items alone
    assert parallel_map_then(str, [1, 2], len, lambda first: ["ab", ""], ready=0,
                             workers=workers) == (["1", "2"], [2, 0])
    assert parallel_map_then(str, [1, 2], len, lambda first: [], ready=2,
                             workers=workers) == (["1", "2"], [])


@forks
def test_planned_pieces_run_in_the_workers_that_ran_the_first_ones():
    from collections import Counter

    from topomodel import parallel

    def mark(x: int) -> int:  # what a worker builds stays for its later pieces
        parallel.__dict__.setdefault("_test_marks", []).append(x)
        return os.getpid()

    def marks(_: int) -> tuple[int, int, bool]:
        return (os.getpid(), len(parallel.__dict__.get("_test_marks", [])),
                "_test_planned" in parallel.__dict__)

    def plan(pids: list[int]) -> range:  # here, in the caller, after the first pieces
        parallel.__dict__["_test_planned"] = True
        return range(4)

    try:
        first, planned = parallel_map_then(mark, range(6), marks, plan, ready=6, workers=2)
    finally:
        parallel.__dict__.pop("_test_planned", None)
    assert os.getpid() not in first and "_test_marks" not in parallel.__dict__
    # forked before the plan (a pool forked after it would see its mark), each keeping
    # what its own first pieces built (however the first pieces fell between them)
    ran = Counter(first)
    assert all(not after_plan and count == ran[pid] for pid, count, after_plan in planned)
    assert os.getpid() not in {pid for pid, _, _ in planned}


def _fail_planned(x: int) -> int:
    if x in (5, 7):
        raise DesignError([Problem("p.yaml", x, "plan", f"bad {x}")])
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_the_first_error_in_the_serial_order_is_raised(workers):
    # serial order: items 0-1, the plan, planned 5 and 6, then items 2-3 (7 fails)
    with pytest.raises(DesignError, match=r"p\.yaml:5: plan: bad 5"):
        parallel_map_then(_fail_planned, [0, 1, 7, 3], _fail_planned,
                          lambda first: [5, 6], ready=2, workers=workers)
    with pytest.raises(DesignError, match=r"p\.yaml:7: plan: bad 7"):
        parallel_map_then(_fail_planned, [0, 7, 5], _fail_planned, lambda first: [1],
                          ready=2, workers=workers)

    def plan(first: list[int]) -> list[int]:
        raise UsageError("no plan")

    with pytest.raises(UsageError, match="no plan"):  # before the items after it fail
        parallel_map_then(_fail_planned, [0, 7], _fail_planned, plan, ready=1,
                          workers=workers)


@forks
def test_an_error_ends_the_planned_pieces_still_running():
    import time

    def piece(x: int) -> int:
        if x == 0:
            raise UsageError("first")
        if x >= 10:
            time.sleep(60)  # after the error in the serial order: not waited for
        return x

    start = time.monotonic()
    with pytest.raises(UsageError, match="first"):  # order: 1, plan, 0, 12, 10, 11
        parallel_map_then(piece, [1, 10, 11], piece, lambda first: [0, 12], ready=1,
                          workers=3)
    assert time.monotonic() - start < 30


def test_a_worker_that_missed_the_terminate_signal_is_killed(monkeypatch):
    """A worker the pool's SIGTERM does not end (one sent it in the moments after its
    fork, stood for here by a piece that ignores it) is killed after the grace period:
    the first piece's error is raised instead of the join waiting forever."""
    import signal
    import time

    import topomodel.parallel as parallel

    monkeypatch.setattr(parallel, "TERMINATE_GRACE_S", 0.5)

    def work(item):
        if item == 0:
            time.sleep(1.0)  # the other piece has begun ignoring SIGTERM by now
            raise ValueError("first")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(120)
        return item

    start = time.perf_counter()
    with pytest.raises(ValueError, match="first"):
        parallel_map(work, [0, 1], workers=2)
    assert time.perf_counter() - start < 60


def _state(pid: int) -> str:
    """A process's state letter (``Z``: ended, not yet reaped), or ``gone``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux") or not can_fork(),
                    reason="the parent-death signal is Linux's")
def test_workers_end_silently_with_a_review_killed_by_sigkill(tmp_path):
    import signal
    import subprocess
    import time

    review = subprocess.Popen(
        [sys.executable, "-m", "topomodel", "review", str(EXAMPLES / "dgx-h100-superpod.yaml"),
         "--model", "llama3-70b", "-o", str(tmp_path / "out"), "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while len(workers) < 2 and review.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _children(review.pid)
        assert len(workers) >= 2, "the review's pool never started"
        time.sleep(0.3)  # the pieces under way
        review.kill()
        killed = time.monotonic()
        err = review.stderr.read()  # at its end once every process holding it has ended
        assert time.monotonic() - killed < 1.0
        assert err == b"", err.decode()[-2000:]
        while (any(_state(pid) not in ("Z", "gone") for pid in workers)
               and time.monotonic() - killed < 2.0):
            time.sleep(0.01)  # the pipe closes a moment before the process is done
        assert all(_state(pid) in ("Z", "gone") for pid in workers)
        assert not (tmp_path / "out").exists()
    finally:
        review.kill()
        review.wait()
        for pid in _children(review.pid):
            os.kill(pid, signal.SIGKILL)


LEAKED_LOCK = """\
import gc, signal, sys, time
from multiprocessing.queues import SimpleQueue
import topomodel.parallel as parallel
parallel.TERMINATE_GRACE_S = 0.5

def work(item):
    # the pool's result queue: the one whose reading end this worker has closed
    results = next(q for q in gc.get_objects()
                   if isinstance(q, SimpleQueue) and q._reader.closed)
    results._wlock.acquire()  # as while sending a result, when the kill comes
    time.sleep(120)

def interrupt(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGALRM, interrupt)
signal.alarm(1)
try:
    parallel.parallel_map(work, [0, 1], workers=2)
except KeyboardInterrupt:
    print("interrupted")
"""


@forks
def test_a_worker_killed_while_sending_leaves_no_lock_to_wait_for():
    """A worker killed holding the result queue's lock (a process-shared semaphore its
    death does not release) does not leave the pool's terminate() waiting on the lock
    forever: the interrupt comes back once the workers are killed."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", LEAKED_LOCK], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.stdout == "interrupted\n", run.stderr[-2000:]
