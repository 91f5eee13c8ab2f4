"""What a publication reads of a finished sweep besides its table: the verified store
(:func:`load_store`) and the run's record (:func:`run_record`): the commands that made it, its
code version, modes, budgets and grid, from the store's attrs and Hydra's ``multirun.yaml``
beside it. The record is written beside the published CSV (``<sweep>.run.yaml``,
:mod:`pipeline.publish.folder`) and into each leg (:mod:`pipeline.publish.legs`), so that a
publication can be drawn again without the store."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from pipeline.config import lookup
from pipeline.config.yaml_limits import load_yaml
from pipeline.publish.comparison import BUDGETS
from pipeline.publish.untrusted import plain_name


def _hydra_record(results: Path) -> DictConfig | None:
    """Hydra's record of the run beside its results (``multirun.yaml``), or None."""
    if not (record := results.parent / "multirun.yaml").exists():
        return None
    load_yaml(record)  # size, depth and aliases bounded before OmegaConf copies them
    return OmegaConf.load(record)


def run_command(record: DictConfig | None, sweep: str, invocations: str | None = None) -> str:
    """The command lines that made the sweep (its ``invocations`` attr: a merged sweep's every
    command, joined by "; then "), else the one in Hydra's ``record``, else its experiment."""
    task = None if record is None else OmegaConf.select(record, "hydra.overrides.task")
    tasks = [c for c in (i.get("command") for i in json.loads(invocations or "[]"))
             if isinstance(c, list) and c] or ([task] if task is not None else [])
    return "; then ".join("python -m pipeline -m " + " ".join(str(o) for o in t)
                          for t in tasks) or f"python -m pipeline -m experiment={sweep}"


def _grid(record: DictConfig | None) -> str | None:
    """The run's grid in Hydra's ``record`` of it: the sweeper's ``params`` and ``grids`` and
    the ``own`` caps, as YAML; None without a record."""
    if record is None:
        return None
    grid = {key: OmegaConf.select(record, path, default=None) for key, path in
            (("params", "hydra.sweeper.params"), ("grids", "hydra.sweeper.grids"),
             ("own", "own"))}
    grid = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
            for k, v in grid.items() if v is not None}
    return yaml.safe_dump(grid, sort_keys=False, allow_unicode=True).strip()


def run_record(ds, results: Path) -> dict:
    """What the README needs of the run besides its table: the commands, the code version, the
    modes, budgets and grid (from the store's attrs and Hydra's record beside it)."""
    standardize = lookup(config := ds.sgp.attrs["config"], "dataset.standardize_y")
    spec = (config.get("report") or {}).get("frontier") or {}
    record = _hydra_record(results)
    modes = spec.get("modes") or {}
    return {"command": run_command(record, str(ds.attrs["sweep"]), ds.attrs.get("invocations")),
            "code_version": f"git {ds.attrs['git_sha']}",
            "mode_order": list(modes.get("order") or []),
            "mode_labels": {str(k): str(v) for k, v in (modes.get("labels") or {}).items()},
            "standardize_y": standardize is None or bool(standardize),
            "budgets": list(spec.get("budgets") or BUDGETS), "grid": _grid(record)}


def load_store(results: str | Path):
    """The verified store, its sweep's plain name and its job table's dataset options."""
    # deferred: the store's reader loads xarray and zarr, which a published CSV, a legs folder
    # and every bad command line do without
    from pipeline.results.consolidate import load

    ds = load(results).load()
    sweep = plain_name(str(ds.attrs["sweep"]), f"{results}: its sweep name")
    standardize = lookup(ds.sgp.attrs["config"], "dataset.standardize_y")
    return ds, sweep, None if standardize is None else {"standardize_y": standardize}
