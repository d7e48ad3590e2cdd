"""How a serving replica spends its time: the prompts' queue, the decode batch an arrival
rate keeps in flight, and, when prefill and decode share the replica (aggregated
serving), the chunked prefill that rides in the decode steps.

**Queue.** Prompts arrive as a Poisson process and are prefilled one at a time: an M/G/1
queue, whose mean wait is Pollaczek-Khinchine's ``rate x E[S^2] / (2 (1 - rate x
E[S]))`` (:func:`pk_wait_s`); with one service time it is M/D/1's (:func:`mdl_wait_s`).

**Decode batch.** Little's law: a replica decodes ``rate x (output - 1) x TPOT``
sequences at once, and TPOT grows with the batch, so the batch is the least fixed point
from 1 (:func:`batch_for_rate`).

**Chunked prefill (aggregated serving).** vLLM's V1 scheduler and SGLang run prefill and
decode on the same instances: each engine step first takes one token of every running
sequence (decode first), then fills what is left of a token budget per step
(``max_num_batched_tokens``, 8,192 by default for ``vllm serve`` on GPUs of 70 GiB or
more) with a chunk of a waiting prompt; a prompt longer than that is prefilled over
several steps (Sarathi-Serve's stall-free batching: Agrawal et al., OSDI 2024). So a step
at decode batch ``b`` is one of two kinds (:func:`mixed_step`):

- **decode only**, ``T0``: the decode step (``max(HBM, compute) + exposed
  communication``);
- **mixed**, ``T1``, with a chunk of ``k = min(prompt, budget - b)`` prompt tokens: the
  decode step's HBM reads (weights, KV cache) overlap the chunk's compute, which is the
  prefill's own (the per-GEMM model of a whole prompt, ``P_c``, pro rata: ``k / prompt``
  of it), so ``T1 = max(HBM, compute + k P_c / prompt) + exposed communication + k P_n /
  prompt`` with ``P_n`` the prefill's exposed collectives. The chunk's GEMMs are timed
  at the prompt's length, and its attention averaged over the prompt (the chunks of one
  prompt add up to its prefill).

A prompt takes ``prompt / k`` mixed steps, ``S = prompt / k x T1``: its prefill, the
service time of the queue above. The replica is in mixed steps ``rho = rate x S`` of the
time (below 1, or the replica cannot keep up) and a decoding sequence gets one token per
step of either kind, so ``TPOT = 1 / (rho / T1 + (1 - rho) / T0)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from topomodel.analysis.serving.decode import DecodeResult
from topomodel.errors import UsageError

MAX_BATCH_ITERATIONS = 40
"""Fixed-point steps that look for the decode batch a rate gives (each one decode step;
the batch grows monotonically from 1, so it settles in a few)."""


def mdl_wait_s(load: float, service_s: float) -> float:
    """Mean wait of an M/D/1 queue at ``load`` (0-1) with service ``service_s``.

    Examples
    --------
    >>> mdl_wait_s(0.5, 2.0)  # half busy: half a service time
    1.0
    """
    return load * service_s / (2.0 * (1.0 - load))


def pk_wait_s(rate_rps: float, mean_s: float, second_moment_s2: float) -> float:
    """Mean wait of an M/G/1 queue (Pollaczek-Khinchine): ``rate x E[S^2] / (2 (1 -
    rate x E[S]))``; with one service time it is M/D/1's :func:`mdl_wait_s`.

    Examples
    --------
    >>> pk_wait_s(0.25, 2.0, 4.0) == mdl_wait_s(0.5, 2.0)
    True
    """
    return rate_rps * second_moment_s2 / (2.0 * (1.0 - rate_rps * mean_s))


def batch_for_rate(step: Callable[[int], DecodeResult], sequences_s: float, max_batch: int
                   ) -> DecodeResult:
    """The decode step at the batch per replica that ``sequences_s`` (rate x decode steps
    per request / replicas) keeps in flight: the least fixed point of ``b = ceil(
    sequences_s x TPOT(b))`` from 1 (TPOT grows with the batch).

    Raises
    ------
    UsageError
        When the batch outgrows the memory (the decode pool cannot keep up).
    """
    batch = 1
    for _ in range(MAX_BATCH_ITERATIONS):
        if batch > max_batch:
            break
        result = step(batch)
        wanted = max(1, math.ceil(sequences_s * result.step_time_s))
        if wanted <= batch:
            return result
        batch = wanted
    raise UsageError(f"--rate: the decode pool cannot keep up; a replica would decode more"
                     f" than {max_batch} sequences at once, what its memory holds"
                     f" (add decode instances or lower the rate)")


@dataclass(frozen=True)
class MixedStep:
    """A replica running chunked prefill beside decode at one batch (seconds)."""

    batch: int
    chunk_tokens: float  # prompt tokens in a mixed step
    decode_only_s: float  # T0
    mixed_s: float  # T1
    prefill_s: float  # one prompt over its mixed steps: the queue's service time
    load: float  # share of time in mixed steps
    tpot_s: float


# PLR0913: a decode step's parts and a prompt's prefill, each a plain number
def mixed_step(*, batch: int, hbm_s: float, compute_s: float,  # noqa: PLR0913
               comm_exposed_s: float, prompt_tokens: float, prefill_compute_s: float,
               prefill_comm_s: float, rate_rps: float, budget_tokens: int) -> MixedStep:
    """One replica's steps at decode batch ``batch`` with chunked prefill (the module
    docstring's model): the decode step's HBM, compute and exposed communication
    seconds, a prompt's prefill compute and exposed collectives, the arrival rate per
    replica and the token budget per step.

    Raises
    ------
    UsageError
        When the batch leaves no room in the budget for a chunk, or prefill would keep
        the replica busy all the time.

    Examples
    --------
    By hand: a decode step of 20 ms of HBM, 5 ms of compute and 2 ms of exposed
    communication (T0 = 22 ms) at batch 192 and a budget of 8,192 tokens: chunks of
    4,000 tokens, a whole 4,000-token prompt (prefill 300 ms of compute, 10 ms of
    collectives) in one mixed step T1 = max(20, 5 + 300) + 2 + 10 = 317 ms. At 1
    request/s the replica is in mixed steps 31.7 % of the time, and TPOT = 1 / (0.317 /
    0.317 + 0.683 / 0.022) = 31.2 ms.

    >>> m = mixed_step(batch=192, hbm_s=0.020, compute_s=0.005, comm_exposed_s=0.002,
    ...                prompt_tokens=4000, prefill_compute_s=0.300, prefill_comm_s=0.010,
    ...                rate_rps=1.0, budget_tokens=8192)
    >>> m.chunk_tokens, round(m.mixed_s, 3), round(m.prefill_s, 3), round(m.load, 3)
    (4000, 0.317, 0.317, 0.317)
    >>> round(m.tpot_s * 1e3, 1)
    31.2

    A budget of 2,048 leaves chunks of 1,856 tokens (46.4 % of the prompt): T1 = max(20,
    5 + 139.2) + 2 + 4.64 = 150.84 ms, over 4000 / 1856 = 2.155 steps 325.1 ms; the
    decode's compute and communication are paid once per step, so smaller chunks pay
    them more often.

    >>> m = mixed_step(batch=192, hbm_s=0.020, compute_s=0.005, comm_exposed_s=0.002,
    ...                prompt_tokens=4000, prefill_compute_s=0.300, prefill_comm_s=0.010,
    ...                rate_rps=1.0, budget_tokens=2048)
    >>> m.chunk_tokens, round(m.mixed_s * 1e3, 2), round(m.prefill_s * 1e3, 1)
    (1856, 150.84, 325.1)
    """
    room = budget_tokens - batch
    if room < 1:
        raise UsageError(f"--chunk-tokens: a decode batch of {batch} fills the budget of"
                         f" {budget_tokens} tokens per step, leaving none for prefill;"
                         " raise it or add instances")
    k = min(prompt_tokens, room)
    share = k / prompt_tokens
    decode_only = max(hbm_s, compute_s) + comm_exposed_s
    mixed = max(hbm_s, compute_s + share * prefill_compute_s) + comm_exposed_s + (
        share * prefill_comm_s)
    service = mixed / share
    load = rate_rps * service
    if load >= 1:
        raise UsageError(f"--rate: {rate_rps:.3g} requests/s per replica keeps it"
                         f" prefilling all the time (each prompt takes {service * 1e3:.1f}"
                         " ms of mixed steps); add instances or lower the rate")
    tpot = 1.0 / (load / mixed + (1.0 - load) / decode_only)
    return MixedStep(batch, k, decode_only, mixed, service, load, tpot)
