"""Where jobs run: the cluster kinds and their options (:mod:`~pipeline.cluster.options`),
starting or reaching a Dask cluster (:mod:`~pipeline.cluster.connect`), warm local workers
(:mod:`~pipeline.cluster.prestart`) and the threads of a job (:mod:`~pipeline.cluster.threads`).
One fit's rows spread over the workers (``blocks=cluster``) are :mod:`pipeline.blocks`."""
