"""A sweep job's Hydra record, ``<job dir>/.hydra/{config,hydra,overrides}.yaml``, written as
Hydra's ``run_job`` writes it, from the plain containers the sweep already holds.

Hydra's ``run_job`` makes two deep copies of the job's ``DictConfig`` (task config and Hydra
node), sets its process-global ``HydraConfig`` twice (two more copies of the Hydra node) and
renders three YAML files through OmegaConf: ~45 ms a job on this 2-core host, where the
benchmark sweep's jobs take ~140 ms. A job whose Hydra settings ask nothing of ``run_job``
beyond these files (:func:`writes_only_files`: no callbacks, no ``hydra.job.env_set``, no
``chdir``, no override of a ``hydra.`` key) has them written here instead, with libyaml, from
the composition's containers converted once a batch; the files load to the same values as
Hydra's (``tests/test_sweep_planning.py``). Any other job still runs through ``run_job``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml
from hydra.types import HydraContext
from omegaconf import OmegaConf

from pipeline.atomic import write_text
from pipeline.config.keys import planned_keys
from pipeline.sweep.compose import Composition, PlannedJob, set_leaf

try:
    _DUMPER: type = yaml.CSafeDumper
except AttributeError:  # PyYAML built without libyaml
    _DUMPER = yaml.SafeDumper


def writes_only_files(hydra_context: HydraContext, job: PlannedJob) -> bool:
    """Whether Hydra's ``run_job`` would do nothing for ``job`` but write its three files and
    call the task function (then :class:`HydraRecords` writes them)."""
    hydra = job.composed.base.cfg.hydra
    return (not getattr(hydra_context.callbacks, "callbacks", None)
            and not hydra.job.env_set and not hydra.job.chdir
            and not any(key.startswith("hydra.") for key, _ in job.composed.leaves))


class HydraRecords:
    """Writes the ``.hydra/`` record of the jobs of one batch; each composition's containers
    are converted once."""

    def __init__(self) -> None:
        self._converted: dict[int, tuple[Composition, dict, dict]] = {}

    def write(self, job: PlannedJob, sweep_dir: Path) -> None:
        """The job's three files, with the values Hydra's ``run_job`` would save: the task
        config unresolved (the resolved algorithm and execution keys the sweep settled, as
        :func:`pipeline.sweep.execute` gives ``run_job``), the Hydra node with this job's number,
        directories and overrides, and the overrides."""
        task, hydra = self._containers(job.composed.base)
        if hydra.get("output_subdir") is None:
            return
        task = copy.deepcopy(task)
        for key, value in job.composed.leaves:
            set_leaf(task, key, copy.deepcopy(value))
        record = job.spec.resolved  # what the sweep settled (its algorithm and execution keys)
        task["algorithm"] = record["algorithm"]
        task["store_root"] = job.spec.store_root
        for key in planned_keys():
            if key in record:
                task[key] = record[key]
        subdir = f"jobs/{job.hash}"
        hydra = {**hydra,
                 "sweep": {**hydra["sweep"], "dir": str(sweep_dir), "subdir": subdir},
                 "overrides": {**hydra["overrides"], "task": list(job.overrides)},
                 "job": {**hydra["job"], "num": job.num, "id": f"{hydra['job']['name']}_{job.num}"},
                 "runtime": {**hydra["runtime"],
                             "output_dir": os.path.abspath(sweep_dir / subdir)}}
        out = sweep_dir / subdir / str(hydra["output_subdir"])
        out.mkdir(parents=True, exist_ok=True)
        for name, content in (("config.yaml", task), ("hydra.yaml", {"hydra": hydra}),
                              ("overrides.yaml", list(job.overrides))):
            write_text(out / name, _yaml(content))

    def _containers(self, base: Composition) -> tuple[dict, dict]:
        kept = self._converted.get(id(base))
        if kept is None or kept[0] is not base:
            hydra = OmegaConf.to_container(base.cfg.hydra, resolve=False, enum_to_str=True)
            kept = (base, base.job_part, hydra)
            self._converted[id(base)] = kept
        return kept[1], kept[2]


def _yaml(content) -> str:
    return yaml.dump(content, Dumper=_DUMPER, default_flow_style=False, allow_unicode=True,
                     sort_keys=False)
