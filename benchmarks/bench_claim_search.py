"""Benchmark: the scorecard's claim search alone (report/review/claims.py), in process.

Run: python benchmarks/bench_claim_search.py [--systems 384] [--per-domain 128]

The worked example's two designs (examples/100k-8npu-servers.yaml and
examples/100k-4k-supernodes.yaml) cut to ``--systems`` 8-NPU systems (supernodes of
``--per-domain`` systems), DeepSeek-V3 at PP 16 x EP 64 with the worked example's
assumptions (compute efficiency 0.7, ZeRO 0, a global batch of half a sequence per NPU:
the example's 49,152 at 98,304 NPUs), and the two claims of
docs/scorecard.md: ``comm_share >= 0.40`` on the servers and ``mfu_ratio >= 2.75``.
The two scorecards (step part only) are made first, untimed; then the CPU seconds of
each claim's search (``time.process_time``: this process, user + system) and the
process's peak RSS. The search itself is what the flags of `topomodel scorecard
--claim` run; set PYTHONPATH to another checkout to time its code.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topomodel.fabric.tables import Fabric

ROOT = Path(__file__).resolve().parent.parent


def fabric_of(name: str, systems: int, per_domain: int) -> Fabric:
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    text = (ROOT / "examples" / f"{name}.yaml").read_text()
    text = text.replace("systems: 12288", f"systems: {systems}").replace(
        "systems_per_domain: 512", f"systems_per_domain: {per_domain}")
    return build_fabric(*load_design(ROOT / "examples" / f"{name}.yaml", text=text))


def main() -> None:
    from topomodel.analysis.assumptions import StepAssumptions
    from topomodel.inputs.parts import Model
    from topomodel.report.review.claims import check_claim, parse_claim
    from topomodel.report.review.scorecard import ScorecardJob, scorecard
    from topomodel.traffic.layout import Layout

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=384)
    parser.add_argument("--per-domain", type=int, default=128)
    args = parser.parse_args()
    fabrics = [fabric_of(n, args.systems, args.per_domain)
               for n in ("100k-8npu-servers", "100k-4k-supernodes")]
    npus = fabrics[0].accelerator_count
    model = fabrics[0].catalog.get("deepseek-v3", Model)
    layout = Layout(pp=16, ep=64, dp=npus // 16, zero=0, global_batch=npus // 2)
    job = ScorecardJob(model, StepAssumptions(compute_efficiency=0.7), layout,
                       routing="auto", parts=("step",))
    cards = [scorecard(f, job) for f in fabrics]
    for text, designs in (("comm_share >= 0.40", 1), ("mfu_ratio >= 2.75", 2)):
        start = time.process_time()
        check = check_claim(fabrics[:designs], [job] * designs, cards[:designs],
                            parse_claim(text))
        cpu = time.process_time() - start
        print(json.dumps({"npus": npus, "claim": text, "cpu_s": round(cpu, 2),
                          "holds_at": {k.knob: k.holds_at for k in check.knobs},
                          "peak_rss_MiB": round(resource.getrusage(
                              resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
