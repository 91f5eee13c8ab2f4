"""Reports of a consolidated sweep: ``python -m pipeline.report <results.zarr>`` writes
``report/`` beside it (figures, tables, ``report.md`` and a self-contained ``report.html``)."""

from pipeline.report.build import main, render, select

__all__ = ["main", "render", "select"]
