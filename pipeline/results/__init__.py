"""Results: one file per job, consolidated into one ``results.zarr`` per sweep, verified when
loaded; loading registers the ``ds.sgp`` accessor on every xarray Dataset; several sweeps of the
same settings join into one Dataset with ``combine``.

    from pipeline.results import combine, load, load_job_result

The names are imported on first use: a job's start reads its job-file module without importing
xarray and pandas (~0.4 s of CPU), which writing its result imports after the fit.
"""

__all__ = ["combine", "load", "load_job_result"]


def __getattr__(name: str):
    if name == "load":
        from pipeline.results.consolidate import load

        return load
    if name == "combine":
        from pipeline.results.combined import combine

        return combine
    if name == "load_job_result":
        from pipeline.results.job_file import load_job_result

        return load_job_result
    raise AttributeError(f"module 'pipeline.results' has no attribute {name!r}")
