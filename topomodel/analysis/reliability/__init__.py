"""Reliability: goodput under failures, the failure classes of a design, and the single-
failure what-ifs."""
