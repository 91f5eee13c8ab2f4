"""A sweep's provenance is the union of its commands (``pipeline.sweep.invocations``): the
manifest, Hydra's records, the results' attrs and the report keep every command and its
points; ``merge=true`` may add a swept key; a refusal names the commands that resume the
unfinished points."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import xarray as xr
from omegaconf import OmegaConf

from algorithms.errors import InputError
from pipeline.config.records import DeviceSpec
from pipeline.report.build import render
from pipeline.report.tables import overhead_line
from pipeline.results.consolidate import load
from pipeline.sweep.invocations import command_text, history_text, invocations
from pipeline.sweep.manifest import entries_kept

BASE = ("algorithm=sgma", "dataset=sine1d", "dataset.n_train=40", "dataset.n_test=20", "seed=0",
        "sweep=p", "cluster.n_workers=1", "cluster.dashboard_address=null")


def sweep(run_cli, cwd: Path, *args: str):
    """``python -m pipeline -m <args>`` with BASE, run in this process (``run_cli``)."""
    return run_cli(cwd, "-m", *args, *BASE)


def _entry(lam: float, h: str, invocation: int | None) -> dict:
    entry = {"coords": {"algorithm": "sgma", "dataset": "sine1d", "lam": lam, "kappa": 5,
                        "seed": 0}, "hash": h, "setting": f"s{h}", "overrides": [f"lam={lam}"]}
    if invocation is not None:
        entry["invocation"] = invocation
    return entry


def test_refusal_names_the_commands_of_the_unfinished_points(tmp_path):
    first, merged = ["lam=0.1,0.2", "sweep=x"], ["lam=0.3", "sweep=x", "merge=true"]
    manifest = {"sweep": "x", "extra_dims": [], "command": first,
                "entries": [_entry(0.1, "a", 0), _entry(0.2, "b", 0), _entry(0.3, "c", 1)],
                "invocations": [{"command": first, "timings": {}},
                                {"command": merged, "timings": {}}]}
    (tmp_path / "jobs").mkdir()
    text = history_text(tmp_path, manifest)  # no result file: every point is unfinished
    assert text.startswith(f"started with: {command_text(first)}, and 1 more command(s) since")
    assert "3 of its 3 points are unfinished" in text
    assert f"rerun {command_text(first)} and {command_text(merged)} to resume them" in text
    # only the merged point unfinished: only its command is named
    manifest["entries"] = manifest["entries"][2:]
    text = history_text(tmp_path, manifest)
    assert text.endswith(f"1 of its 1 points are unfinished: rerun {command_text(merged)} to "
                         "resume it")

    class Job:  # the part of a PlannedJob entries_kept reads
        coords = {"algorithm": "sgma", "dataset": "sine1d", "lam": 0.7, "kappa": 5, "seed": 0}
        setting = "s"
        spec = SimpleNamespace(device=DeviceSpec("cpu", "float64"))

    with pytest.raises(Exception) as refused:
        entries_kept(tmp_path, manifest, [Job()], [], merge=False)
    message = str(refused.value)
    assert "\n" not in message and "holds another sweep" in message
    assert f"rerun {command_text(merged)} to resume it" in message and "merge=true" in message


def test_a_manifest_without_invocations_reads_as_one_command():
    old = {"sweep": "x", "extra_dims": [], "command": ["lam=0.1,0.2"], "swept_keys": ["lam"],
           "timings": {"wall_seconds": 1.0}, "n_workers": 2,
           "entries": [_entry(0.1, "a", None), _entry(0.2, "b", None)]}
    (record,) = invocations(old)
    assert record["command"] == ["lam=0.1,0.2"] and record["points"] == 2
    assert record["timings"] == old["timings"]  # carried over as recorded (not a measurement)
    assert record["hydra_record"] == "multirun.yaml"


def _store(invocations_attr: list[dict]) -> xr.Dataset:
    shape = (1, 1, 3, 1, 1)
    dims = ["algorithm", "dataset", "lam", "kappa", "seed"]
    coords = {"algorithm": ["sgma"], "dataset": ["sine1d"], "lam": [0.1, 0.2, 0.3],
              "kappa": [5], "seed": [0]}
    return xr.Dataset({"job_hash": (dims, np.array(["a", "b", "c"]).reshape(shape)),
                       "job_seconds": (dims, np.array([1.0, 1.0, 0.5]).reshape(shape))},
                      coords=coords, attrs={"invocations": json.dumps(invocations_attr)})


def test_each_commands_overhead_is_from_its_own_jobs():
    timings = {"jobs_seconds": 1.0, "wall_seconds": 2.0}
    ds = _store([{"command": ["lam=0.1,0.2"], "n_workers": 2, "ran": ["a", "b"],
                  "timings": timings},
                 {"command": ["lam=0.3"], "n_workers": 1, "ran": ["c"], "timings": timings},
                 {"command": ["lam=0.1"], "n_workers": 1, "ran": [], "timings": {}}])
    lines = overhead_line(ds).splitlines()
    assert len(lines) == 2  # the third command ran no job
    assert lines[0].startswith("- overhead of command 1 of 3: 2 jobs on 2 workers; sum of job "
                               "times 2.00 s, / workers = 1.00 s")
    assert "wall / ideal = 2.00" in lines[0]
    assert lines[1].startswith("- overhead of command 2 of 3: 1 job on 1 worker; sum of job "
                               "times 0.50 s") and "wall / ideal = 4.00" in lines[1]


def test_merges_keep_every_command_and_may_add_a_swept_key(tmp_path, run_cli):
    first = sweep(run_cli, tmp_path, "lam=0.1,1")
    assert first.returncode == 0, first.stderr[-3000:]
    one = sweep(run_cli, tmp_path, "lam=0.5", "merge=true")  # a one-point merge
    assert one.returncode == 0, one.stderr[-3000:]
    # a new swept key: the old points are at the default width (10.0), run again by none
    wider = sweep(run_cli, tmp_path, "lam=0.1,1", "kernel.width=10.0,2", "merge=true")
    assert wider.returncode == 0, wider.stderr[-3000:]
    assert "4 sweep points, 4 distinct jobs: 2 already finished, 2 run" in wider.stdout
    sweep_dir = tmp_path / "outputs" / "p"

    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    commands = [r["command"] for r in manifest["invocations"]]
    assert [c[0] for c in commands] == ["lam=0.1,1", "lam=0.5", "lam=0.1,1"]
    assert manifest["command"] == commands[0]  # the first command's, as before
    assert [r["added"] for r in manifest["invocations"]] == [2, 1, 2]
    assert manifest["swept_keys"] == ["lam", "kernel.width"]
    assert manifest["extra_dims"] == ["kernel.width"]
    by_point = {(e["coords"]["lam"], e["coords"]["kernel.width"]): e["invocation"]
                for e in manifest["entries"]}
    assert by_point == {(0.1, 10.0): 0, (1, 10.0): 0, (0.5, 10.0): 1, (0.1, 2): 2, (1, 2): 2}
    # Hydra's record of each command: the first's stays multirun.yaml
    for name, command in (("multirun.yaml", commands[0]), ("multirun.2.yaml", commands[1]),
                          ("multirun.3.yaml", commands[2])):
        assert list(OmegaConf.load(sweep_dir / name).hydra.overrides.task) == command, name

    ds = load(sweep_dir / "results.zarr").load()
    attrs = ds.sgp.attrs
    assert attrs["swept_keys"] == ["lam", "kernel.width"]
    assert [r["command"] for r in attrs["invocations"]] == commands
    assert [r["entries"] for r in attrs["invocations"]] == [2, 1, 2]
    assert ds["kernel.width"].values.tolist() == [2, 10]
    old = ds["status"].sel(lam=[0.1, 1.0], **{"kernel.width": 10.0}).values.ravel()
    assert set(old.tolist()) == {"ok"}
    assert ds["job_hash"].sel(lam=0.5, **{"kernel.width": 2}).item() == ""  # no command's

    text = render(sweep_dir / "results.zarr").read_text()
    assert "swept: lam, kernel.width)" in text
    assert "Made by 3 commands:" in text and "`multirun.3.yaml`" in text
    assert "- overhead of command 2 of 3: 1 job on 1 worker" in text
    rows = [line for line in text.splitlines() if line.startswith("| sine1d |")]
    assert len(rows) == 5 and all(row.endswith("| 1/0/0 |") for row in rows)  # sweep points

    # a job result lost: a refused grid names the merge that resumes it, not the first sweep
    h = ds["job_hash"].sel(lam=0.5, **{"kernel.width": 10.0}).item()
    (sweep_dir / "jobs" / h / "result.nc").unlink()
    refused = sweep(run_cli, tmp_path, "lam=0.7")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert ("1 of its 5 points are unfinished: rerun "
            f"{command_text([*commands[1]])} to resume it") in refused.stderr
    assert list(OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task) == commands[0]
    assert not (sweep_dir / "multirun.4.yaml").exists()

    # resume=last after merges: every command with an unfinished point, oldest first (here
    # the first and the second), and nothing else is run again
    h0 = ds["job_hash"].sel(lam=0.1, **{"kernel.width": 10.0}).item()
    (sweep_dir / "jobs" / h0 / "result.nc").unlink()
    again = subprocess.run([sys.executable, "-m", "pipeline", "resume=last"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    announced = [line for line in again.stdout.splitlines() if line.startswith("resume=last")]
    assert announced == [f"resume=last, command 1 of 2: {command_text(commands[0])}",
                         f"resume=last, command 2 of 2: {command_text(commands[1])}"], \
        again.stdout
    assert "1 run" in again.stdout and again.stdout.count("1 already finished, 1 run") == 1
    assert (sweep_dir / "jobs" / h0 / "result.nc").is_file()
    assert (sweep_dir / "jobs" / h / "result.nc").is_file()
    assert len(json.loads((sweep_dir / "manifest.json").read_text())["invocations"]) == 3


def test_merging_points_at_another_value_of_a_fixed_key_is_refused(tmp_path):
    # a unit of split 1 merged into a store of split 0's units would be labelled split 0
    first = ["dataset=kin40k", "dataset.split=0", "experiment=uci_frontier"]
    old = {"sweep": "x", "extra_dims": [], "command": first,
           "entries": [{"overrides": first, "coords": {"dataset": "kin40k"}, "hash": "a",
                        "setting": "s", "invocation": 0}],
           "invocations": [{"command": first, "timings": {}}]}
    (tmp_path / "jobs").mkdir()

    class Job:  # the part of a PlannedJob entries_kept reads
        def __init__(self, dataset, split):
            self.overrides = [f"dataset={dataset}", f"dataset.split={split}",
                              "experiment=uci_frontier", "merge=true"]
            self.coords, self.setting = {"dataset": dataset}, "t"
            self.spec = SimpleNamespace(device=DeviceSpec("cpu", "float64"))

    with pytest.raises(InputError) as refused:
        entries_kept(tmp_path, old, [Job("bike", 1)], [], merge=True)
    message = str(refused.value)
    assert "\n" not in message and "dataset.split=1" in message
    assert "fixed dataset.split=0" in message and "sweep=<new name>" in message
    # another data set at the same split merges; a swept key is a dim, not a fixed value
    assert entries_kept(tmp_path, old, [Job("bike", 0)], [], merge=True) == old["entries"]
    swept = {**old, "extra_dims": ["dataset.split"]}
    assert entries_kept(tmp_path, swept, [Job("bike", 1)], ["dataset.split"], merge=True)


def test_points_at_another_device_or_precision_are_refused_before_they_run(tmp_path):
    """device and precision are in a job's identity but in no point's coordinates: a merge
    (or a rerun) at another one would put other jobs under the sweep's points, and the
    store would drop or relabel one of the two. Refused up front, unless the key is a dim."""
    first = ["lam=0.1", "sweep=x"]
    old = {"sweep": "x", "extra_dims": [], "command": first, "config": {"device": "cpu"},
           "entries": [_entry(0.1, "a", 0)],
           "invocations": [{"command": first, "timings": {},
                            "config": {"device": "cpu", "precision": "float64"}}]}
    (tmp_path / "jobs").mkdir()

    class Job:  # the part of a PlannedJob entries_kept reads
        def __init__(self, device="cpu", precision="float64", lam=0.1):
            self.overrides, self.hash = [f"lam={lam}", f"device={device}"], "b"
            self.coords = {**_entry(lam, "b", 0)["coords"]}
            self.setting = "sa"  # the setting hash leaves device and precision out
            self.spec = SimpleNamespace(device=DeviceSpec(device, precision))

    for job, merge in ((Job("torch:cpu"), True), (Job("torch:cpu"), False),
                       (Job("torch:cpu", lam=0.3), True)):
        with pytest.raises(InputError) as refused:
            entries_kept(tmp_path, old, [job], [], merge=merge)
        line = str(refused.value)
        assert "\n" not in line and line.startswith(
            f"the sweep in {tmp_path} was run at device=cpu, and this command runs its "
            "points at device=torch:cpu"), line
        assert "pass sweep=<new name> for a new sweep directory, or make device a swept dim " \
               "of this one (device=cpu,torch:cpu with merge=true)" in line
    torch_sweep = {**old, "invocations": [{**old["invocations"][0], "config": {
        "device": "torch:cpu", "precision": "float64"}}]}
    with pytest.raises(InputError, match="was run at precision=float64, and this command "
                                         "runs its points at precision=float32"):
        entries_kept(tmp_path, torch_sweep, [Job("torch:cpu", "float32")], [], merge=True)
    # the same device: a rerun and a merge as before; a manifest that records no device ran
    # on the default one (cpu, float64)
    assert entries_kept(tmp_path, old, [Job()], [], merge=False) == []
    assert entries_kept(tmp_path, old, [Job(lam=0.3)], [], merge=True) == old["entries"]
    legacy = {k: v for k, v in old.items() if k not in ("invocations", "config")}
    assert entries_kept(tmp_path, legacy, [Job(lam=0.3)], [], merge=True) == old["entries"]
    with pytest.raises(InputError, match="was run at device=cpu"):
        entries_kept(tmp_path, legacy, [Job("cuda", lam=0.3)], [], merge=True)
    # device a dim of the sweep: its points at another device are new points
    along = {**old, "extra_dims": ["device"], "entries": [
        {**old["entries"][0], "coords": {**old["entries"][0]["coords"], "device": "cpu"}}]}
    job = Job("torch:cpu", lam=0.1)
    job.coords = {**job.coords, "device": "torch:cpu"}
    assert entries_kept(tmp_path, along, [job], ["device"], merge=True) == along["entries"]
