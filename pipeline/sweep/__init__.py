"""Multirun sweeps on Dask, the work behind Hydra's ``hydra/launcher=dask``: compose every
point (:mod:`~pipeline.sweep.compose`), plan and name the jobs (:mod:`~pipeline.sweep.plan`),
claim the directory's points (:mod:`~pipeline.sweep.manifest`), schedule the jobs on the
cluster (:mod:`~pipeline.sweep.schedule`), run each on a worker through Hydra's ``run_job``
(:mod:`~pipeline.sweep.execute`), consolidate, and sum up (:mod:`~pipeline.sweep.outcome`);
:func:`pipeline.sweep.launch.launch` is the whole flow."""
