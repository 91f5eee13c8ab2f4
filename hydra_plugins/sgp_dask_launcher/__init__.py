"""Hydra launcher plugin that runs multirun jobs on Dask (``hydra/launcher=dask``)."""
