"""Record real PyTorch profiler traces on this machine: two CPU processes (gloo), a tiny
model, one gradient all-reduce and one loss all-reduce per step, ``torch.profiler`` with
a schedule so that every step is a ``ProfilerStep#N``.

Used by ``tests/inputs/test_kineto.py`` (which records afresh when torch is installed)
and to make the committed ``tests/data/traces/gloo-2rank/`` files::

    python tests/inputs/kineto_recorder.py tests/data/traces/gloo-2rank
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

WORLD = 2
STEPS = 4  # recorded (after one warm-up step)
WIDTH = 256  # the model's hidden size: 2 x (256 x 256 + 256) parameters, 526 kB of grads
BATCH = 64


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, folder: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(WIDTH, WIDTH))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH)
    path = Path(folder) / f"rank{rank}.json.gz"

    def save(prof: profile) -> None:
        prof.export_chrome_trace(str(path))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS),
                 on_trace_ready=save) as prof:
        for _ in range(1 + STEPS):
            loss = model(x).square().mean()
            loss.backward()
            grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(grads)  # the data-parallel gradient reduction
            dist.all_reduce(loss.detach())  # the logged loss
            offset = 0
            for p in model.parameters():
                p.grad.copy_(grads[offset:offset + p.numel()].view_as(p) / world)
                offset += p.numel()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def record(folder: str | Path, world: int = WORLD) -> list[Path]:
    """Record one trace per rank into ``folder``; the files written, in rank order."""
    import torch.multiprocessing as mp

    Path(folder).mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank, args=(world, str(folder), _free_port()), nprocs=world, join=True)
    return [Path(folder) / f"rank{r}.json.gz" for r in range(world)]


if __name__ == "__main__":
    print("\n".join(str(p) for p in record(sys.argv[1])))
