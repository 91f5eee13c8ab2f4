"""Results: one file per job, consolidated into one ``results.zarr`` per sweep, verified when
loaded; importing the package registers the ``ds.sgp`` accessor on every xarray Dataset.

    from pipeline.results import load, load_job_result
"""

from pipeline.results import access  # noqa: F401  (registers the accessor)
from pipeline.results.consolidate import load
from pipeline.results.job_file import load_job_result

__all__ = ["load", "load_job_result"]
