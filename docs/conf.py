"""Sphinx configuration of the documentation site (``python -m sphinx -W -b html docs
docs/_build/html``; ``.ci/run`` builds it with warnings as errors)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "sparse-gp-bench"
author = "the sparse-gp-bench authors"
copyright = "2026, the sparse-gp-bench authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' numpydoc sections (Parameters, Returns)
    "sphinx.ext.mathjax",
    "schema_pages",  # the reference pages generated from the specs (docs/_ext)
    "run_examples",  # every Python example runs when the site builds (docs/_ext)
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 4  # [text](page.md#a-heading) links, as GitHub renders them
# fragments the published READMEs include
exclude_patterns = ["_build", "uci_frontier_notes.md", "uci_frontier_pilot3_notes.md"]
suppress_warnings = ["myst.header"]  # pages keep the README's heading levels

html_theme = "pydata_sphinx_theme"
html_title = "sparse-gp-bench"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
html_static_path = ["_static"]
html_css_files = ["custom.css"]
