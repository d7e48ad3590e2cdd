"""The reports of the serving verbs: one decode step (``decode``) and a serving job
(``serve``)."""
