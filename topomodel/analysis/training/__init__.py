"""The training step: compute, memory, the pipeline schedule, the step's collectives and
their overlap, the bounds the planner prunes with, and the studies and advice built on
the step."""
