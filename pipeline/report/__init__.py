"""Reports of a consolidated sweep: ``python -m pipeline.report <results.zarr>`` writes
``report/`` beside it (figures, tables, ``report.md`` and a self-contained ``report.html``).
What lives where:

- :mod:`pipeline.report.build`: the command line (``main``) and ``render``, which a sweep
  calls when its ``report/`` exists;
- :mod:`pipeline.report.figures`, :mod:`pipeline.report.tables`,
  :mod:`pipeline.report.frontier`, :mod:`pipeline.report.scaling`: what the report draws and
  tabulates; :mod:`pipeline.report.style`: the look its figures share;
- :mod:`pipeline.report.markdown` (inert text), :mod:`pipeline.report.html` and
  :mod:`pipeline.report.interactive`: ``report.md`` as ``report.html`` and the Bokeh page.

A finished run's published folder is :mod:`pipeline.publish`, which draws its frontier figures
with :mod:`pipeline.report.frontier` and :mod:`pipeline.report.style` and writes its README with
:mod:`pipeline.report.markdown`; nothing here imports it. Nothing is imported here either, so a
module of the package loads alone (the publication's import of the markdown helpers does not
load matplotlib and Bokeh through the report's builder).
"""
