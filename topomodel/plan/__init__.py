"""The layout planner: every valid parallel layout of a model on a design's fabric,
through the step model's checks, memory and step time, the best kept.

- :mod:`topomodel.plan.space`: which layouts a plan searches (its objectives, searched
  fields and default limits in :mod:`topomodel.plan.defaults`, which the parser reads);
- :mod:`topomodel.plan.search`: deciding each layout, ranking, in this process;
- :mod:`topomodel.plan.spread`: the same search spread over a process pool or Dask;
- :mod:`topomodel.plan.explain`: why the best layout beats the runner-up.
"""
