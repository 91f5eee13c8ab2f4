"""The published folder of an accuracy-against-time run (``python -m pipeline.publish``,
``sgp-bench publish``): its table, its statistics, its figures and README, and the long run
kept in legs. What lives where:

- :mod:`pipeline.publish.cli`: the command line (``main``; what the folder holds, in its
  ``--help``); :mod:`pipeline.publish.folder`: :func:`~pipeline.publish.folder.publish` from
  a store, a legs folder or a published CSV, and the folder's files written and switched in;
- :mod:`pipeline.publish.job_table`: the published table (one row per job and mode), its
  columns, flags and baselines; :mod:`pipeline.publish.run_record`: the run's record (commands,
  code version, modes, budgets, grid) from the store and Hydra's ``multirun.yaml``;
- :mod:`pipeline.publish.comparison`, :mod:`pipeline.publish.ranking` and
  :mod:`pipeline.publish.stats`: the tables compared, ranked and tested;
  :mod:`pipeline.publish.published`: the README rendered from them;
- :mod:`pipeline.publish.render`: the critical-difference diagrams
  (:mod:`pipeline.publish.critical_difference`), the ``--notes`` and the ``--beside`` numbers
  published elsewhere (:mod:`pipeline.publish.elsewhere`); the frontier figures drawn from the
  table: :mod:`pipeline.publish.table_frontier` (with the sweep report's
  :mod:`pipeline.report.frontier`);
- :mod:`pipeline.publish.legs`: a run kept as verified (data set, split) records and published
  as one; :mod:`pipeline.publish.publication_files`: which files of ``--out`` a publication
  owns, staged and switched in; :mod:`pipeline.publish.untrusted`: the checks on every input it
  did not write itself.

The sweep's own report (``python -m pipeline.report``) is :mod:`pipeline.report`; this package
imports from it (the frontier drawing, its styles, inert markdown), never the reverse. Nothing
is imported here: ``import pipeline.publish.legs`` loads the legs alone.
"""
