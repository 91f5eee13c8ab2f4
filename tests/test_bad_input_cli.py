"""Bad input on the command line of one job and of a sweep: one ``error:`` line, exit 2, the
bad value named, nothing on disk changed (harness: ``tests/bad_input.py``)."""

from pathlib import Path

import pytest

from tests.bad_input import Case, params, run_case, run_command

JOB = ("pipeline", "dataset=sine1d", "dataset.n_train=40")
SWEEP = ("pipeline", "-m", "dataset=sine1d", "dataset.n_train=40", "cluster.n_workers=1",
         "cluster.dashboard_address=null")
SEED_SWEEP = (*SWEEP, "algorithm=sgma,exact", "dataset.n_test=20", "lam=0.1", "seed=0",
              "sweep=seed")

CASES = [
    # config-group choices
    Case("unknown-algorithm", (*JOB, "algorithm=nope"), ("'nope'", "sgma")),
    Case("unknown-algorithm-in-list", (*SWEEP, "algorithm=sgma,nope"), ("'nope'",)),
    Case("empty-algorithm", (*JOB, "algorithm="), ("algorithm",)),
    Case("trailing-comma", (*SWEEP, "algorithm=sgma,"), ("unknown algorithm ''",)),
    Case("unknown-dataset", ("pipeline", "dataset=iris"), ("'iris'", "abalone")),
    Case("unknown-kernel", (*JOB, "kernel=gauss"), ("'gauss'", "rbf")),
    Case("unknown-cluster", (*SWEEP, "cluster=k8s"), ("'k8s'", "local")),
    Case("unknown-experiment", ("pipeline", "-m", "experiment=nope"), ("'nope'", "zhang2001")),
    Case("unknown-launcher", (*SWEEP, "hydra/launcher=nope"), ("nope", "dask")),
    Case("unknown-size", (*JOB, "size=tiny"), ("'tiny'", "full, small")),
    Case("size-without-experiment", ("pipeline", "size=small"),
         ("size=small reduces an experiment", "experiment=<name>", "zhang2001")),
    # override syntax and keys
    Case("unknown-key", (*JOB, "foo=1"), ("'foo'", "lam")),
    Case("unknown-key-typo", (*JOB, "lamb=0.1"), ("'lamb'", "lam")),
    Case("not-key-value", (*JOB, "=1"), ("'=1'", "key=value")),
    Case("missing-equals", (*JOB, "lam"), ("'lam'",)),
    Case("bad-sweep-function", (*SWEEP, "seed=range(0,x)"), ("range(0,x)",)),
    # option typos: one error listing the valid options, never Hydra's '+' hint
    Case("algorithm-option-typo", (*JOB, "algorithm.epss=0.1"), ("'epss'", "eps")),
    Case("algorithm-option-typo-sweep", (*SWEEP, "algorithm=sgma,exact", "algorithm.epss=0.1"),
         ("algorithm.epss", "eps", "max_n")),
    Case("experiment-option-typo", ("pipeline", "-m", "experiment=zhang2001",
                                    "algorithm.max_basiss=5"), ("max_basiss", "max_basis")),
    Case("dataset-option-typo", (*JOB, "dataset.n_trian=5"), ("'n_trian'", "n_train")),
    # sizes beyond memory: refused before anything is allocated, naming the memory needed
    # (the largest sizes an int option takes, 2**31 - 1, on a 10-dimensional set: ~570 GiB)
    Case("dataset-beyond-memory-1d", (*JOB, "dataset.n_train=2147483647",
                                      "dataset.n_test=2147483647"),
         ("n_train=2147483647", "GiB to build", "lower dataset.n_train")),
    Case("dataset-beyond-memory-10d", (*JOB, "dataset=friedman1", "dataset.n_train=2147483647"),
         ("'friedman1'", "n_train=2147483647", "to build")),
    Case("dataset-beyond-memory-test-rows", (*JOB, "dataset=friedman1",
                                             "dataset.n_test=2147483647"),
         ("'friedman1'", "n_test=2147483647", "to build", "lower dataset.n_test")),
    Case("dataset-beyond-memory-sweep", (*SWEEP, "dataset=friedman1",
                                         "dataset.n_train=2147483647,40"),
         ("n_train=2147483647", "to build")),
    # sizes beyond what a 32-bit index holds: refused by their range
    Case("dataset-beyond-int32", (*JOB, "dataset.n_train=10000000000000"),
         ("n_train=10000000000000", "≤ 2147483647")),
    Case("kernel-option-typo", (*JOB, "kernel.widht=3"), ("'widht'", "width")),
    # values in a sweep stop it before any job runs
    Case("sweep-negative-lam", (*SWEEP, "lam=0.1,-1"), ("lam=-1",)),
    Case("sweep-zero-kappa", (*SWEEP, "kappa=0,5"), ("kappa=0",)),
    Case("sweep-text-seed", (*SWEEP, "seed=0,abc"), ("seed='abc'",)),
    Case("sweep-negative-eps", (*SWEEP, "algorithm.eps=-1,0.1"), ("algorithm.eps=-1",)),
    Case("sweep-bad-option-of-one-algorithm", (*SWEEP, "algorithm=sgma,exact",
                                               "algorithm.max_n=0"), ("algorithm.max_n=0",)),
    Case("sweep-bad-dataset-option", (*SWEEP, "dataset.n_test=-3,5"), ("n_test=-3",)),
    Case("sweep-csv-without-path", (*SWEEP[:2], "dataset=csv", "seed=0,1"), ("dataset.path",)),
    Case("sweep-csv-missing-file", (*SWEEP[:2], "dataset=csv", "dataset.path=/no/such.csv",
                                    "seed=0,1"), ("/no/such.csv",)),
    # the certificate's options
    Case("certificate-tol-negative", (*JOB, "certificate.tol=-1"), ("certificate.tol=-1",)),
    Case("certificate-tol-text", (*JOB, "certificate.tol=abc"), ("certificate.tol='abc'",)),
    Case("certificate-kappa-zero", (*JOB, "certificate.kappa=0"), ("certificate.kappa=0",)),
    Case("unknown-device", (*JOB, "device=gpu"), ("device='gpu'", "cuda:N")),
    Case("float32-on-the-cpu-path", (*JOB, "precision=float32"),
         ("precision=float32", "device=torch:cpu")),
    Case("device-for-a-numpy-algorithm", (*JOB, "algorithm=rvm", "device=torch:cpu"),
         ("algorithm rvm does not run on device=torch:cpu", "exact")),
    Case("sweep-device-for-a-numpy-algorithm", (*SWEEP, "algorithm=sgma,rvm",
                                                "device=torch:cpu"),
         ("algorithm rvm does not run on device=torch:cpu", "exact")),
    Case("float32-for-a-float64-peer", (*JOB, "algorithm=gpytorch_sgpr", "device=torch:cpu",
                                        "precision=float32"),
         ("algorithm gpytorch_sgpr computes in float64 only", "precision=float64")),
    Case("negative-job-timeout", (*JOB, "job_timeout=-1"), ("job_timeout=-1", "job_timeout=600")),
    Case("sweep-text-job-timeout", (*SWEEP, "job_timeout=soon"), ("job_timeout='soon'",)),
    Case("unknown-blocks", (*JOB, "blocks=everywhere"), ("blocks='everywhere'", "cluster")),
    Case("cluster-blocks-undeclared", (*JOB, "algorithm=exact", "blocks=cluster"),
         ("algorithm exact does not run with blocks=cluster", "sgma")),
    Case("sweep-unknown-blocks", (*SWEEP, "seed=0,1", "blocks=everywhere"),
         ("blocks='everywhere'",)),
    Case("certificate-enabled-text", (*JOB, "certificate.enabled=maybe"),
         ("certificate.enabled='maybe'",)),
    Case("certificate-max-dual-negative", (*JOB, "certificate.max_dual=-5"),
         ("certificate.max_dual=-5",)),
    # where a sweep goes
    Case("sweep-name-empty", (*SWEEP, "sweep="), ("sweep=''",)),
    Case("sweep-name-escapes", (*SWEEP, "sweep=../elsewhere"), ("sweep='../elsewhere'",)),
    # values Hydra's parser takes only quoted, interpolations that do not resolve
    Case("full-width-digit", (*JOB, "lam=\uff11"), ("lam=\uff11", "U+FF11", "quote the value")),
    Case("non-ascii-path", (*JOB, "dataset=csv", "dataset.path=/tmp/donn\u00e9es.csv"),
         ("dataset.path=/tmp/donn\u00e9es.csv", "quote the value")),
    Case("unresolved-interpolation", (*JOB, "lam=${nope}"), ("'nope'", "lam")),
    Case("sweep-name-is-outputs", (*SWEEP, "sweep=."), ("sweep='.'", "outputs/ itself")),
    # a name longer than a file system takes: bounded, and the error line never raises
    Case("sweep-name-too-long", (*SWEEP, "seed=0,1", "sweep=" + "a" * 260),
         ("sweep=" + "a" * 40, "260 bytes", "100")),
    Case("sweep-name-too-long-nested", (*SWEEP, "seed=0,1", "sweep=" + "/".join(["a" * 60] * 5)),
         ("304 bytes", "100")),
    Case("sweep-dir-name-too-long", (*SWEEP, "seed=0,1", "hydra.sweep.dir=outputs/" + "a" * 300),
         ("a" * 300, "longer than its file system allows")),
    # learning-curve sizes: bounded before anything is drawn or allocated
    Case("learning-curve-draws", (*JOB, "algorithm=exact", "dataset=matern1d", "kernel=matern32",
                                  "+learning_curve.n=[5]", "+learning_curve.draws=1000000000"),
         ("learning_curve.draws=1000000000", "1000000")),
    Case("learning-curve-n", (*JOB, "algorithm=exact", "dataset=matern1d", "kernel=matern32",
                              "+learning_curve.n=[5,100000]"),
         ("n up to 100000", "GiB", "learning_curve.n")),
    Case("learning-curve-nodes", (*JOB, "algorithm=exact", "dataset=matern1d",
                                  "kernel=matern32", "+learning_curve.n=[5]",
                                  "+learning_curve.n_nodes=10000000"),
         ("learning_curve.n_nodes=10000000",)),
    Case("learning-curve-sizes", (*JOB, "algorithm=exact", "dataset=matern1d",
                                  "kernel=matern32", "+learning_curve.n=[" + ",".join(
                                      ["5"] * 1001) + "]"), ("1001 values",)),
    Case("learning-curve-sweep-draws", (*SWEEP, "algorithm=exact", "dataset=matern1d",
                                        "kernel=matern32", "seed=0,1", "+learning_curve.n=[5]",
                                        "+learning_curve.draws=1000000000"),
         ("learning_curve.draws=1000000000",)),
    Case("sweep-name-dot-part", (*SWEEP, "sweep=a/./b"), ("sweep='a/./b'", "no '.'")),
    Case("merge-not-bool", (*SWEEP, "seed=0,1", "merge=maybe"), ("merge='maybe'",)),
    Case("store-root-empty", (*JOB, "store_root="), ("store_root=''",)),
    # a sweep directory holding another sweep is never replaced
    Case("other-grid-same-directory", (*SEED_SWEEP[:-3], "lam=0.5", "seed=0", "sweep=seed"),
         ("outputs/seed holds another sweep", "sweep=<new name>", "merge=true")),
    Case("same-points-other-settings", (*SEED_SWEEP, "kernel.width=3"),
         ("holds another sweep", "other settings", "sweep=<new name>")),
    Case("merge-same-points-other-settings", (*SEED_SWEEP, "kernel.width=3", "merge=true"),
         ("other settings",)),
    Case("dry-run-into-existing-sweep", (*SEED_SWEEP[:2], "cluster=slurm", "cluster.dry_run=1",
                                         "sweep=seed", "seed=0,1"), ("cluster.dry_run=1",)),
]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


# also as real `python -m` commands: the override checks of one job, a sweep's composition,
# a sweep directory that is kept
E2E = ["unknown-key-typo", "algorithm-option-typo-sweep", "other-grid-same-directory"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("case", params(CASES, E2E))
def test_bad_input_as_a_command(case, seed_dir, tmp_path):
    run_command(case, seed_dir, tmp_path / "work")


@pytest.mark.parametrize(("value", "env", "named"), [
    ("'../escaped'", {}, "sweep='../escaped'"),
    ("${oc.env:SGP_SWEEP}", {"SGP_SWEEP": "../escaped"}, "sweep='../escaped'"),
    ("${oc.env:SGP_SWEEP}", {"SGP_SWEEP": "/tmp/escaped"}, "sweep='/tmp/escaped'"),
    ("${oc.env:SGP_SWEEP}", {"SGP_SWEEP": "."}, "outputs/ itself"),
], ids=["quoted", "interpolated-parent", "interpolated-absolute", "interpolated-outputs"])
def test_a_sweep_name_resolved_outside_outputs_creates_nothing(value, env, named, seed_dir,
                                                               tmp_path, capfd, monkeypatch):
    """The sweep name is checked as resolved, before Hydra makes its directory or writes
    multirun.yaml: nothing appears outside the working directory's outputs/ (nor in it)."""
    work = tmp_path / "work"
    case = Case("escape", (*SWEEP, f"sweep={value}"), (named,), env=env)
    run_case(case, seed_dir, work, capfd, monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert not Path("/tmp/escaped").exists()
    assert not (work / "outputs" / "multirun.yaml").exists()
