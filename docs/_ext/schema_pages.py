"""Sphinx extension: the reference pages generated from the code's own declarations when the
site builds, so that no table of keys, options or result variables is kept by hand:

- ``reference/keys.md``: every top-level key of a job's config (:data:`pipeline.config.keys.
  TOP_LEVEL`, its default from ``conf/config.yaml``) and the certificate's options;
- ``reference/algorithms.md``: every registered algorithm with its options
  (:data:`algorithms.registry.REGISTRY`, each spec's :class:`~algorithms.options.Option` table);
- ``reference/clusters.md``: every cluster kind with its options
  (:data:`pipeline.cluster.options.OPTIONS`);
- ``reference/methods.md``: each algorithm module's docstring (its paper and equations);
- ``reference/variables.md``: every variable a result holds, with its units
  (:data:`algorithms.variables.DESCRIPTIONS` and :data:`pipeline.results.variables.PIPELINE`).

The pages are written under ``docs/reference/generated/`` (not kept in git) before Sphinx
reads the sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GENERATED = Path(__file__).resolve().parents[1] / "reference" / "generated"


def _cell(value: Any) -> str:
    """A default as a user writes it on the command line (YAML: null, true, {a: 1})."""
    import yaml

    if value == "":
        return ""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return f"`{text}`".replace("|", "\\|")


def _text(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _options_table(options: dict) -> list[str]:
    rows = ["| option | default | accepts | meaning |", "|---|---|---|---|"]
    for name, option in options.items():
        rows.append(f"| `{name}` | {_cell(option.default)} | {_text(option.describe())} | "
                    f"{_text(option.doc)} |")
    return rows


def keys_page() -> str:
    from pipeline.config import job_defaults
    from pipeline.config.keys import CERTIFICATE_OPTIONS, TOP_LEVEL

    defaults = job_defaults()
    lines = ["# Top-level keys", "",
             "Every top-level key of a job's config (`conf/config.yaml`), generated from "
             "`pipeline/config/keys.py`. A key's role says what it is to a job's identity "
             "(see [what reruns a job](../../explanation/identity.md)): `identity` keys name "
             "the job; `execution`, `location` and `applied` ones do not.", "",
             "| key | role | default | meaning |", "|---|---|---|---|"]
    for name, key in TOP_LEVEL.items():
        default = "(config group)" if key.group else _cell(defaults.get(name))
        lines.append(f"| `{name}` | {key.role} | {default} | {_text(key.doc)} |")
    lines += ["", "## The certificate (`certificate.*`)", "", *_options_table(CERTIFICATE_OPTIONS)]
    return "\n".join(lines) + "\n"


def algorithms_page() -> str:
    from algorithms.registry import REGISTRY

    lines = ["# Algorithms and their options", "",
             "Every registered algorithm (`algorithm=<name>`) with its options "
             "(`algorithm.<option>=<value>`), generated from the algorithm specs under "
             "`algorithms/`. The prose, with the papers' equations, is in "
             "[Algorithms](../../explanation/algorithms.md).", ""]
    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        lines += [f"## `{name}`", "", _text(spec.doc) + f" ({spec.task}).", ""]
        lines += _options_table(dict(spec.options)) if spec.options else ["No options."]
        lines.append("")
    return "\n".join(lines)


def clusters_page() -> str:
    from pipeline.cluster.kinds import KINDS
    from pipeline.cluster.options import OPTIONS

    lines = ["# Cluster kinds and their options", "",
             "Every cluster kind (`cluster=<kind>`) with its options (`cluster.<option>=...`), "
             "generated from `pipeline/cluster/kinds/`.", ""]
    for name, kind in KINDS.items():
        lines += [f"## `{name}`", "", _text(kind.doc) + ".", "", *_options_table(OPTIONS[name]),
                  ""]
    return "\n".join(lines)


def variables_page() -> str:
    from algorithms.variables import DESCRIPTIONS
    from pipeline.results.variables import PIPELINE

    lines = ["# Result variables", "",
             "What every variable of a result means, with its units (written as CF "
             "`long_name` and `units` attributes), generated from the declarations the "
             "result files are written from."]
    for title, source, table in (
            ("A fit's trace and summary", "algorithms/variables.py", DESCRIPTIONS),
            ("What the pipeline adds", "pipeline/results/variables.py", PIPELINE)):
        lines += ["", f"## {title}", "", f"Declared in `{source}`.", "",
                  "| variable | meaning | units |", "|---|---|---|"]
        for name, (long_name, units) in sorted(table.items()):
            lines.append(f"| `{name}` | {_text(long_name)} | {_text(units)} |")
    return "\n".join(lines) + "\n"


def _reflowed(doc: str) -> str:
    """A docstring's prose paragraphs each on one line (the page wraps them to its width);
    a paragraph with an indented or list line (equations, lists, tables) kept as written."""
    paragraphs = doc.split("\n\n")
    kept = [p if any(line[:1] in (" ", "-", "|", "*") for line in p.splitlines())
            else " ".join(p.split()) for p in paragraphs]
    return "\n\n".join(kept)


def methods_page() -> str:
    import importlib

    from algorithms.registry import REGISTRY

    modules: dict[str, list[str]] = {}
    for name in sorted(REGISTRY):
        modules.setdefault(REGISTRY[name].fit.__module__, []).append(name)
    lines = ["# The algorithms, with their papers' equations", "",
             "Each algorithm module's own account of its method (the paper, the equations it "
             "implements, numbered as in the paper, and its limit cases), its docstring shown "
             "as written, so that it cannot drift from the code. The options are in "
             "[Algorithms and their options](algorithms.md).", ""]
    for module, names in modules.items():
        doc = _reflowed((importlib.import_module(module).__doc__ or "").strip())
        lines += [f"## `{module}`: " + ", ".join(f"`{n}`" for n in names), "",
                  "````text", doc.replace("````", "` ` ` `"), "````", ""]
    return "\n".join(lines)


PAGES = {"keys.md": keys_page, "algorithms.md": algorithms_page, "methods.md": methods_page,
         "clusters.md": clusters_page, "variables.md": variables_page}


def write_pages(app=None) -> None:
    GENERATED.mkdir(parents=True, exist_ok=True)
    for name, make in PAGES.items():
        text = make()
        path = GENERATED / name
        if not path.exists() or path.read_text() != text:  # unchanged: not rebuilt
            path.write_text(text)


def setup(app) -> dict:
    app.connect("builder-inited", write_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
