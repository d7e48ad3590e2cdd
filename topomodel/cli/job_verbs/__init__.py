"""The verbs about a model's job on a design: ``step``, ``goodput``, ``compare``,
``scale``, ``review``, ``advise``, ``decode``, ``plan``, ``sweep`` and ``options`` (the
table of the job's options).

One module per verb, named after it, each with the same shape: a docstring saying what
the verb answers and ``run(args) -> Report``; :mod:`topomodel.cli.parser` defines its
flags and points the verb at its module. A verb module imports no other verb module:
what two verbs share is in :mod:`topomodel.cli.shared`."""
