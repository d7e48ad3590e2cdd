"""The verbs about a design and its network without a model's job: ``units``,
``catalog``, ``schema``, ``build``, ``route``, ``draw``, ``export`` and ``check-nccl``.

One module per verb, named after it, each with the same shape: a docstring saying what
the verb answers and ``run(args) -> Report``; :mod:`topomodel.cli.parser` defines its
flags and points the verb at its module. A verb module imports no other verb module:
what two verbs share is in :mod:`topomodel.cli.shared`."""
