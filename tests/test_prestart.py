"""Local workers forked from the command line's warm fork server (pipeline.cluster.prestart)."""

import json
import os
import subprocess
import sys

import pytest

from pipeline.cluster.prestart import wants_local_workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("argv, expected", [
    (["-m", "lam=0.1,1"], True),
    (["--multirun", "lam=0.1,1"], True),
    (["experiment=bench_sweep_overhead"], True),          # its file says mode: MULTIRUN
    (["experiment=bench_sweep_overhead", "cluster=local"], True),
    (["lam=0.1"], False),                                 # one job: no cluster
    (["algorithm=sgma", "blocks=cluster"], True),         # one job spread over a cluster
    (["blocks=cluster", "cluster=address"], False),
    (["experiment=no_such_experiment"], False),
    (["experiment=../config"], False),
    (["-m", "lam=0.1,1", "cluster=address"], False),      # workers elsewhere
    (["-m", "lam=0.1,1", "dry_run=true"], False),         # nothing runs
    (["-m", "--cfg", "job"], False),                      # Hydra's own flags
])
def test_only_a_local_sweep_prestarts(argv, expected):
    assert wants_local_workers(argv) is expected


PROBE = """
import json, multiprocessing, os, sys
from pipeline.cluster.prestart import prestart
started = prestart(sys.argv[1:])
from threadpoolctl import threadpool_info
from pipeline.cluster.connect import connect
from omegaconf import OmegaConf
from pipeline.config import CONF_DIR
cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "cluster" / "local.yaml"))
cfg.update(n_workers=2, dashboard_address=None)

def probe():
    import dask
    blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return {"ppid": os.getppid(), "blas_threads": blas,
            "malloc_trim": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            "profile_interval": dask.config.get("distributed.worker.profile.interval"),
            "openblas_env": os.environ.get("OPENBLAS_NUM_THREADS"),
            "preloaded": "pipeline.sweep.launch" in sys.modules,
            "method": multiprocessing.get_start_method(allow_none=True)}

with connect(cfg) as client:
    workers = list(client.run(probe).values())
print(json.dumps({"started": started, "client": os.getpid(), "workers": workers}))
"""


@pytest.mark.parametrize("argv, forked", [(["-m"], True), (["lam=0.1"], False)])
def test_local_workers_fork_from_the_prestarted_server_with_pinned_blas(argv, forked):
    """With a prestarted fork server the workers are its children (not the client's), have
    the worker code imported before any task, and keep Dask's one-thread BLAS setting; a
    command that is not a local sweep spawns them as before. Either way they run without
    Dask's MALLOC_TRIM_THRESHOLD_ and with the profiler at 100 ms (prestart.WORKER_SETTINGS)."""
    # this test process may carry Dask's variable: a LocalCluster started in-process by an
    # earlier test set it in os.environ (Dask's nanny does, to spawn its workers)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["started"] is forked
    assert len(result["workers"]) == 2
    for worker in result["workers"]:
        assert (worker["ppid"] != result["client"]) is forked
        assert worker["preloaded"] is forked
        assert worker["openblas_env"] == "1"
        assert worker["blas_threads"] and set(worker["blas_threads"]) == {1}
        assert worker["malloc_trim"] is None
        assert worker["profile_interval"] == "100ms"


WARM_PROBE = """
import json, sys, time
from omegaconf import OmegaConf
from pipeline.cluster.connect import connect
from pipeline.config import CONF_DIR
cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "cluster" / "local.yaml"))
cfg.update(n_workers=1, dashboard_address=None, memory_limit=sys.argv[1])

def loaded():
    return {"tiles": "algorithms._fused_exp" in sys.modules, "numba": "numba" in sys.modules}

with connect(cfg) as client:  # wait for the load (or 3 s to see that none starts)
    deadline = time.monotonic() + float(sys.argv[2])
    state = list(client.run(loaded).values())[0]
    while not all(state.values()) and time.monotonic() < deadline:  # the module is in
        # sys.modules from the start of its import, before numba is
        time.sleep(0.25)
        state = list(client.run(loaded).values())[0]
print(json.dumps(state))
"""


@pytest.mark.parametrize("limit, warmed", [("auto", True), ("400MB", False)])
def test_a_local_worker_warms_up_the_kernel_tiles_at_its_start(limit, warmed):
    """A local worker loads the kernel tiles' compiled code on a thread at its start (Dask
    preload pipeline.cluster.prestart), so its first job does not wait for it — except under a
    memory limit below 1 GiB, where numba is not loaded until a job needs it."""
    out = subprocess.run([sys.executable, "-c", WARM_PROBE, limit, "60" if warmed else "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"tiles": warmed,
                                                               "numba": warmed}


def test_workers_load_the_compiled_tiles_only_for_a_sweep_that_uses_them(tmp_path):
    """A sweep's local workers load the kernel tiles' compiled code at their start only when a
    job will use it: a fused kernel on a set of at least WARM_UP_ROWS rows, or of unknown
    size, or the Laplacian/Matérn at any size (the RBF below takes numpy's exp)."""
    from types import SimpleNamespace

    from pipeline.sweep.schedule import uses_compiled_tiles

    def job(kernel: str, **dataset) -> SimpleNamespace:
        return SimpleNamespace(spec=SimpleNamespace(kernel=SimpleNamespace(name=kernel),
                                                    dataset=dataset))

    small = job("rbf", name="sine1d", n_train=100)
    assert not uses_compiled_tiles([small, job("linear", name="abalone", n_train=4000)])
    assert uses_compiled_tiles([small, job("rbf", name="abalone", n_train=4000)])
    assert uses_compiled_tiles([job("laplacian", name="sine1d", n_train=100)])
    one_line = tmp_path / "one.csv"
    one_line.write_text("1.0,2.0\n")  # too short for its shape to be told: size unknown
    assert uses_compiled_tiles([job("rbf", name="csv", path=str(one_line))])


MALLOC_PROBE = """
import json, resource, sys
import numpy as np
from pipeline.cluster.here import unpin_malloc_thresholds

def faults() -> int:  # minor page faults of 100 allocations of a 1 MiB array, filled and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        np.ones(1 << 17)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()
pinned = faults()
unpinned = unpin_malloc_thresholds()
print(json.dumps({"pinned": pinned, "unpinned": unpinned, "after": faults(),
                  "again": unpin_malloc_thresholds()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("environ", [{"MALLOC_TRIM_THRESHOLD_": "65536"}, {}])
def test_a_job_task_unpins_the_malloc_thresholds_dask_workers_start_with(environ):
    """Under Dask's MALLOC_TRIM_THRESHOLD_=65536 every 1 MiB array is mapped afresh (a page
    fault per page, 256 each); a job's task sets glibc's thresholds once, and the arrays then
    reuse the heap. Without the variable nothing is changed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | environ
    out = subprocess.run([sys.executable, "-c", MALLOC_PROBE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["again"] is False  # once per process
    if environ:
        assert result["pinned"] >= 100 * 200, result
        assert result["unpinned"] is True
        assert result["after"] < 1000, result
    else:
        assert result["unpinned"] is False
        assert result["pinned"] < 1000 and result["after"] < 1000, result


ADDRESS_PROBE = """
import json, os, resource
import numpy as np
from distributed import LocalCluster
from pipeline.cluster.connect import connect

def faults() -> dict:  # as MALLOC_PROBE's, on the worker
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        np.ones(1 << 17)
    return {"trim": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}

if __name__ == "__main__":
    # a researcher's running cluster, started with Dask's defaults
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        with cluster.get_client() as plain:
            plain.run(faults)
            before = list(plain.run(faults).values())[0]
        with connect({"kind": "address", "address": cluster.scheduler_address,
                      "start_timeout": "10s"}) as client:
            after = list(client.run(faults).values())[0]
    print(json.dumps({"before": before, "after": after}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_connecting_to_a_running_cluster_unpins_its_workers_malloc_thresholds(tmp_path):
    """A cluster started elsewhere has Dask's MALLOC_TRIM_THRESHOLD_ in its workers: a 1 MiB
    array faults its 256 pages at every allocation. connect() registers a worker plugin that
    resets the thresholds before any of our tasks runs, and then the arrays reuse the heap."""
    script = tmp_path / "probe.py"  # a file: the LocalCluster's spawned workers import it
    script.write_text(ADDRESS_PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"]["trim"] == "65536" and result["before"]["faults"] >= 100 * 200
    assert result["after"]["faults"] < 1000, result
