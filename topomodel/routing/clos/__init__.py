"""The fat-tree routers' shared views of a structured fabric: the healthy Clos
(:mod:`~topomodel.routing.clos.view`), the arcs a failure leaves
(:mod:`~topomodel.routing.clos.live`) and the paths over them, one section at a time
(:mod:`~topomodel.routing.clos.paths`). The structured router, the failure router
(:mod:`~topomodel.routing.survivors`), planes, relays and the supernode patch read these
public views instead of each other's private classes."""
