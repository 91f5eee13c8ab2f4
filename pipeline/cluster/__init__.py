"""Where jobs run: the cluster kinds and their options (:mod:`~pipeline.cluster.options`),
starting or reaching a Dask cluster (:mod:`~pipeline.cluster.connect`), warm local workers
(:mod:`~pipeline.cluster.prestart`), the threads of a job (:mod:`~pipeline.cluster.threads`),
and one fit's rows spread over the workers (``blocks=cluster``: :mod:`~pipeline.cluster.blocks`
on the client, :mod:`~pipeline.cluster.shards` on the workers)."""
