"""Collective timing: routing a collective's traffic over the fabric and timing it as NCCL
would (protocols, link rates, the algorithm search, measured curves, link loads, the
bound a step's communication cannot beat)."""
