"""Where a fit's kernel blocks come from, beside the in-memory arrays of
:class:`algorithms.kernel_blocks.ArrayKernelBlocks`: a dataset's verified zarr store
(:mod:`~pipeline.blocks.store`, ``blocks=memory``), or its rows spread over a Dask cluster's
workers (``blocks=cluster``: :mod:`~pipeline.blocks.cluster` on the client,
:mod:`~pipeline.blocks.shards` on the workers). :func:`pipeline.job.run.kernel_blocks` picks
one for a job."""
