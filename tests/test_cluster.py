"""Cluster options: one table per kind (the yaml files agree with it), validated before anything
starts; nothing waits for ever; the dashboard listens on 127.0.0.1 unless told otherwise."""

import os
import subprocess
import sys
import time

import psutil
import pytest
from distributed import LocalCluster
from omegaconf import OmegaConf

from algorithms.errors import InputError
from pipeline.cluster.connect import connect, job_script
from pipeline.cluster.options import OPTIONS, check, memory_hint
from pipeline.config import CONF_DIR
from pipeline.results.consolidate import load


def yaml_config(name: str, **changes) -> dict:
    conf = OmegaConf.load(CONF_DIR / "cluster" / f"{name}.yaml")
    conf = OmegaConf.merge({"scheduler": None}, {"cluster": conf}, {"cluster": changes})
    return OmegaConf.to_container(conf, resolve=True)["cluster"]


def test_every_cluster_yaml_matches_its_table():
    assert {p.stem for p in (CONF_DIR / "cluster").glob("*.yaml")} == set(OPTIONS)
    for kind, options in OPTIONS.items():
        conf = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "cluster" / f"{kind}.yaml"))
        assert set(conf) == set(options), kind
        for key, opt in options.items():
            if key != "address":  # ${scheduler}, set on the command line
                assert conf[key] == opt.default, (kind, key)
        if kind != "address":
            check(conf)  # the shipped defaults are valid


def test_defaults_are_safe():
    assert OPTIONS["local"]["dashboard_address"].default.startswith("127.0.0.1:")
    # generous: a loaded machine starts local workers slowly (issue 51), but not for ever
    assert OPTIONS["local"]["start_timeout"].default == "60s"
    assert OPTIONS["address"]["start_timeout"].default == "10s"
    for kind in ("slurm", "pbs"):  # queueing may take a while, but not for ever
        assert OPTIONS[kind]["dashboard_address"].default.startswith("127.0.0.1:")
        assert OPTIONS[kind]["start_timeout"].default == "1h"


@pytest.mark.parametrize("name,changes,names", [
    ("local", {"n_workers": -1}, "cluster.n_workers=-1"),
    ("local", {"n_workers": 0}, "cluster.n_workers=0"),
    ("local", {"n_workers": 1.5}, "cluster.n_workers=1.5"),
    ("local", {"threads_per_worker": 0}, "cluster.threads_per_worker=0"),
    ("local", {"memory_limit": "lots"}, "cluster.memory_limit='lots'"),
    ("local", {"memory_limit": "1kB"}, "cluster.memory_limit='1kB'"),
    ("local", {"memory_limit": -5}, "cluster.memory_limit=-5"),
    ("local", {"dashboard_address": "8787"}, "cluster.dashboard_address='8787'"),
    ("local", {"dashboard_address": "127.0.0.1:99999"}, "99999"),
    ("local", {"dashboard_address": "203.0.113.7:8787"}, "203.0.113.7"),
    ("local", {"dashboard_address": "no.such.host.invalid:8787"}, "no.such.host.invalid"),
    ("local", {"start_timeout": "soon"}, "cluster.start_timeout='soon'"),
    ("local", {"start_timeout": "0s"}, "cluster.start_timeout='0s'"),
    ("local", {"start_timeout": -3}, "cluster.start_timeout=-3"),
    ("local", {"kind": "sge"}, "'sge'"),
    ("address", {}, "scheduler=tcp://host:8786"),
    ("address", {"address": "nowhere"}, "scheduler='nowhere'"),
    ("address", {"address": "tcp://h:99999"}, "scheduler='tcp://h:99999'"),
    ("slurm", {"n_jobs": 0}, "cluster.n_jobs=0"),
    ("slurm", {"cores": 0}, "cluster.cores=0"),
    ("slurm", {"processes": 0}, "cluster.processes=0"),
    ("slurm", {"processes": 4, "cores": 2}, "cluster.processes=4"),
    ("slurm", {"gpus": 2}, "cluster.gpus=2"),
    ("slurm", {"gpus": 1, "processes": 2, "cores": 2}, "cluster.gpus=1 with cluster.processes=2"),
    ("pbs", {"gpus": -1}, "cluster.gpus=-1"),
    ("slurm", {"memory": "auto"}, "cluster.memory='auto'"),
    ("slurm", {"memory": "1GB", "processes": 8, "cores": 8}, "cluster.memory='1GB'"),
    ("slurm", {"walltime": "1h"}, "cluster.walltime='1h'"),
    ("slurm", {"walltime": "01:99:00"}, "cluster.walltime='01:99:00'"),
    ("slurm", {"walltime": 3600}, "cluster.walltime=3600"),
    ("slurm", {"job_extra_directives": "--exclusive"}, "cluster.job_extra_directives"),
    ("slurm", {"interface": "no-such-if0"}, "cluster.interface='no-such-if0'"),
    ("pbs", {"walltime": "2-00:00:00"}, "cluster.walltime='2-00:00:00'"),
    ("pbs", {"dry_run": "yes"}, "cluster.dry_run='yes'"),
    ("pbs", {"queue": ""}, "cluster.queue=''"),
])
def test_bad_cluster_options_are_refused_before_anything_starts(name, changes, names):
    with pytest.raises(InputError) as err:
        check(yaml_config(name, **changes))
    message = str(err.value)
    assert "\n" not in message and names in message, message


def test_valid_forms_are_accepted():
    assert check(yaml_config("local", dashboard_address=":0"))["dashboard_address"] == \
        "127.0.0.1:0"  # an empty host is this machine only
    assert check(yaml_config("local", dashboard_address="0.0.0.0:8787"))["dashboard_address"] \
        == "0.0.0.0:8787"  # exposing it is explicit
    assert check(yaml_config("local", dashboard_address=None))["dashboard_address"] is None
    assert check(yaml_config("slurm", dashboard_address=None))["dashboard_address"] is None
    check(yaml_config("local", memory_limit=4_000_000_000, n_workers=2, start_timeout=30))
    check(yaml_config("slurm", walltime="2-00:00:00", memory="16GB", cores=4, processes=2))
    check(yaml_config("slurm", walltime="30"))
    assert check(yaml_config("address", address="127.0.0.1:8786"))["address"] == \
        "tcp://127.0.0.1:8786"


def test_auto_memory_shares_the_machine_among_the_workers_not_the_cores():
    from distributed.system import MEMORY_LIMIT

    from pipeline.cluster.memory import worker_memory_limit

    one = check(yaml_config("local", n_workers=1))
    assert worker_memory_limit(one) == MEMORY_LIMIT  # the one worker may use all of it
    assert worker_memory_limit(check(yaml_config("local", n_workers=4))) == MEMORY_LIMIT // 4
    assert worker_memory_limit(check(yaml_config("local", memory_limit="4GB"))) == 4 * 10**9


def test_memory_hint_names_the_limit_and_the_option():
    assert "cluster.memory_limit=4GB" in memory_hint(yaml_config("local", memory_limit="4GB"))
    assert "3.73 GiB" in memory_hint(yaml_config("local", memory_limit="4GB"))
    hint = memory_hint(yaml_config("slurm", memory="8GB", cores=2, processes=2))
    assert "3.73 GiB" in hint and "cluster.memory=8GB" in hint
    assert "dask worker --memory-limit" in memory_hint(
        yaml_config("address", address="tcp://127.0.0.1:8786"))


def test_the_dashboard_listens_on_localhost_by_default():
    with connect(yaml_config("local", n_workers=1, dashboard_address=":0")) as client:
        port = int(client.dashboard_link.split(":")[-1].split("/")[0])
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        listening = [c.laddr for c in psutil.Process().net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


def test_a_scheduler_without_workers_fails_within_start_timeout():
    with LocalCluster(n_workers=0, dashboard_address="127.0.0.1:0") as cluster:
        start = time.monotonic()
        with pytest.raises(InputError, match="has no worker after cluster.start_timeout=1s"):
            with connect(yaml_config("address", address=cluster.scheduler_address,
                                     start_timeout="1s")):
                pass
        assert time.monotonic() - start < 5


def test_a_refused_address_fails_at_once():
    start = time.monotonic()
    with pytest.raises(InputError, match=r"no Dask scheduler at scheduler=tcp://127.0.0.1:9 "):
        with connect(yaml_config("address", address="tcp://127.0.0.1:9")):
            pass
    assert time.monotonic() - start < 2


def fake_batch_system(bin_dir, sbatch: str) -> str:
    """A PATH whose ``sbatch`` runs the shell code ``sbatch`` (``$1`` is the job script) and
    whose ``scancel`` does nothing; the rest of PATH is kept."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in (("sbatch", sbatch), ("scancel", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_no_submit_command_fails_at_once_but_a_dry_run_needs_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no qsub
    for name, command, marker in (("slurm", "sbatch", "#SBATCH"), ("pbs", "qsub", "#PBS")):
        with pytest.raises(InputError, match=f"cluster={name} submits batch jobs with "
                                             f"`{command}`, which is not on PATH"):
            with connect(yaml_config(name)):
                pass
        script = job_script(yaml_config(name, dry_run=True))
        assert marker in script and "dask_worker" in script


def test_a_gpu_batch_job_asks_for_its_gpu(monkeypatch, tmp_path):
    """cluster.gpus=1: each batch job asks for one GPU (SLURM --gres=gpu:1, PBS -l ngpus=1)
    and runs one worker; without it the script asks for none."""
    for name, line in (("slurm", "#SBATCH --gres=gpu:1"), ("pbs", "#PBS -l ngpus=1")):
        script = job_script(yaml_config(name, dry_run=True, gpus=1, cores=4))
        assert line in script
        assert "gpu" not in job_script(yaml_config(name, dry_run=True)).lower()


def test_a_refused_submission_fails_at_once_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", fake_batch_system(
        tmp_path / "bin", "echo 'sbatch: error: Invalid account' >&2; exit 1"))
    start = time.monotonic()
    with pytest.raises(InputError, match="the batch job was refused: sbatch exited with 1: "
                                         "sbatch: error: Invalid account; fix "
                                         "cluster.account=None"):
        with connect(yaml_config("slurm", n_jobs=1)):
            pass
    assert time.monotonic() - start < 10


def test_a_job_that_never_starts_fails_at_start_timeout(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", fake_batch_system(tmp_path / "bin",
                                                 "echo 'Submitted batch job 4242'"))
    start = time.monotonic()
    with pytest.raises(InputError, match=r"no batch job \(jobs 4242: squeue -j 4242\) started a "
                                         "worker within cluster.start_timeout=2s"):
        with connect(yaml_config("slurm", n_jobs=1, start_timeout="2s")):
            pass
    assert time.monotonic() - start < 10


def test_a_slurm_sweep_runs_through_its_submit_command(tmp_path):
    """A fake sbatch that runs the job script at once: the sweep's workers are batch jobs."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    path = fake_batch_system(tmp_path / "bin", f'script=$(mktemp {jobs}/job-XXXXXX)\n'
                             'cp "$1" "$script"\nnohup sh "$script" >"$script.log" 2>&1 &\n'
                             'echo "Submitted batch job $$"')
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", "cluster=slurm", "cluster.n_jobs=1",
         "cluster.memory=1GB", "cluster.start_timeout=60s", "cluster.dashboard_address=null",
         "algorithm=sgma", "dataset=sine1d", "dataset.n_train=40", "kappa=5", "seed=0,1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PATH": path})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ds = load(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))
    assert set(ds["status"].values.ravel().tolist()) == {"ok"}
    assert set(ds["worker"].values.ravel().tolist()) == {"SLURMCluster-0"}


def test_importing_dask_jobqueue_keeps_the_ctrl_c_handler(monkeypatch):
    """dask_jobqueue's runner module sets SIGINT to ``sys.exit()`` when imported: a SLURM
    sweep's Ctrl-C would exit 0 in silence. The pipeline imports it with the handler kept."""
    import signal

    from pipeline.cluster.kinds.jobqueue import import_jobqueue

    for name in [m for m in sys.modules if m.split(".")[0] == "dask_jobqueue"]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh here (put back afterwards)
    before = signal.getsignal(signal.SIGINT)
    import_jobqueue()
    assert "dask_jobqueue.runner" in sys.modules  # the module that sets the handler ran
    assert signal.getsignal(signal.SIGINT) is before
