"""Bad numbers and bad data on the command line of one job: kernel parameters, lam, kappa, seed,
algorithm and dataset options, CSV files, arithmetic that breaks down, an exact GP too large
for memory, an edited store and an unusable store_root. Each is one ``error:`` line naming the
bad value, exit 2, nothing on disk changed (harness: ``tests/bad_input.py``)."""

import os
from pathlib import Path

import pytest

from tests.bad_input import Case, params, run_case, run_command

# the dataset of the seed sweep: its store exists, so these jobs ingest nothing
SEED_DATA = ("dataset=sine1d", "dataset.n_train=40", "dataset.n_test=20")


def job(*args: str) -> tuple[str, ...]:
    """A single job on the seed's dataset (later arguments override earlier ones)."""
    return ("pipeline", *SEED_DATA, "kappa=5", *args)


def csv_file(name: str, text: str):
    """A setup writing ``text`` to ``{dir}/<name>``."""
    def setup(workdir: Path) -> None:
        (workdir / name).write_text(text)

    return setup


def rows(values, column: int = 1, n: int = 8) -> str:
    """n rows of 3 columns with ``values`` (cycled) in ``column``, small numbers elsewhere."""
    out = []
    for i in range(n):
        row = [str(i), str(i % 3), str(0.5 * i)]
        row[column] = values[i % len(values)]
        out.append(",".join(row))
    return "\n".join(out) + "\n"


def unwritable_dir(workdir: Path) -> None:
    """``{dir}/ro`` that nothing can be written under: a read-only directory, or, as root
    (whom chmod does not stop), a regular file."""
    if os.geteuid() == 0:
        (workdir / "ro").write_text("a file, not a directory\n")
    else:
        (workdir / "ro").mkdir()
        (workdir / "ro").chmod(0o555)


CASES = [
    # ------------------------------------------------------------ kernel parameters
    Case("rbf-width-zero", job("kernel.width=0"), ("kernel.width=0", "> 0")),
    Case("rbf-width-negative", job("kernel.width=-1.5"), ("kernel.width=-1.5",)),
    Case("rbf-width-inf", job("kernel.width=inf"), ("kernel.width=inf",)),
    Case("rbf-width-nan", job("kernel.width=nan"), ("kernel.width=nan",)),
    Case("rbf-width-abc", job("kernel.width=abc"), ("kernel.width='abc'",)),
    Case("rbf-width-subnormal-overflows", job("kernel.width=1e-320"),
         ("kernel rbf(width=1e-320)", "NaN/inf", "kernel.width=10.0")),
    Case("laplacian-omega-zero", job("kernel=laplacian", "kernel.omega=0"), ("kernel.omega=0",)),
    Case("laplacian-omega-nan", job("kernel=laplacian", "kernel.omega=nan"),
         ("kernel.omega=nan",)),
    Case("matern32-mu-negative", job("kernel=matern32", "kernel.mu=-0.5"), ("kernel.mu=-0.5",)),
    Case("matern32-mu-inf", job("kernel=matern32", "kernel.mu=inf"), ("kernel.mu=inf",)),
    Case("matern32-mu-abc", job("kernel=matern32", "kernel.mu=abc"), ("kernel.mu='abc'",)),
    Case("polynomial-degree-fraction", job("kernel=polynomial", "kernel.degree=2.5"),
         ("kernel.degree=2.5", "an integer ≥ 1")),
    Case("polynomial-degree-zero", job("kernel=polynomial", "kernel.degree=0"),
         ("kernel.degree=0",)),
    Case("polynomial-c-inf", job("kernel=polynomial", "kernel.c=inf"), ("kernel.c=inf",)),
    Case("polynomial-c-abc", job("kernel=polynomial", "kernel.c=abc"), ("kernel.c='abc'",)),
    Case("polynomial-overflows", job("kernel=polynomial", "kernel.degree=5000"),
         ("kernel polynomial(c=1.0, degree=5000)", "NaN/inf", "kernel.degree=2")),
    Case("linear-has-no-width", job("kernel=linear", "+kernel.width=3"),
         ("kernel 'linear' has no option 'width'",)),
    # ------------------------------------------------------------ lam, kappa, seed
    Case("lam-zero", job("lam=0"), ("lam=0",)),
    Case("lam-negative", job("lam=-0.5"), ("lam=-0.5",)),
    Case("lam-inf", job("lam=inf"), ("lam=inf",)),
    Case("lam-nan", job("lam=nan"), ("lam=nan",)),
    Case("lam-abc", job("lam=abc"), ("lam='abc'",)),
    Case("lam-tiny-sgma", job("algorithm=sgma", "lam=1e-300"),
         ("lam=1e-300", "kernel rbf(width=10.0)", "larger lam")),
    Case("lam-huge-exact", job("algorithm=exact", "lam=1e300"),
         ("lam=1e+300", "kernel rbf(width=10.0)", "smaller lam")),
    Case("lam-tiny-zhang", job("algorithm=zhang_greedy", "lam=1e-300"),
         ("lam=1e-300", "larger lam")),
    Case("lam-tiny-online", job("algorithm=sparse_online", "lam=1e-300"),
         ("lam=1e-300", "larger lam")),
    Case("lam-cholesky-breaks-down", job("algorithm=exact", "lam=3e-16"),
         ("algorithm exact: the arithmetic broke down", "lam=3e-16",
          "kernel rbf(width=10.0)", "larger lam")),
    Case("kappa-negative", job("kappa=-1"), ("kappa=-1",)),
    Case("kappa-fraction", job("kappa=1.5"), ("kappa=1.5",)),
    Case("kappa-abc", job("kappa=abc"), ("kappa='abc'",)),
    Case("seed-negative", job("seed=-1"), ("seed=-1",)),
    Case("seed-abc", job("seed=abc"), ("seed='abc'",)),
    # ------------------------------------------------------------ algorithm options
    Case("sgma-eps-negative", job("algorithm=sgma", "algorithm.eps=-1"), ("algorithm.eps=-1",)),
    Case("sgma-max-basis-zero", job("algorithm=sgma", "algorithm.max_basis=0"),
         ("algorithm.max_basis=0",)),
    Case("exact-max-n-zero", job("algorithm=exact", "algorithm.max_n=0"),
         ("algorithm.max_n=0",)),
    Case("zhang-max-basis-abc", job("algorithm=zhang_greedy", "algorithm.max_basis=abc"),
         ("algorithm.max_basis='abc'",)),
    Case("online-tol-nan", job("algorithm=sparse_online", "algorithm.tol=nan"),
         ("algorithm.tol=nan",)),
    Case("online-max-basis-negative", job("algorithm=sparse_online", "algorithm.max_basis=-5"),
         ("max_basis=-5",)),
    Case("pbr-m-zero", job("algorithm=pbr", "algorithm.m=0"), ("algorithm.m=0",)),
    Case("pbr-above-max-n", job("algorithm=pbr", "algorithm.max_n=10"),
         ("n_train=40", "algorithm.max_n=10")),
    # ------------------------------------------------------------ dataset options
    Case("n-train-zero", job("dataset.n_train=0"), ("n_train=0",)),
    Case("n-test-negative", job("dataset.n_test=-1"), ("n_test=-1",)),
    Case("noise-var-negative", job("dataset.noise_var=-0.1"), ("noise_var=-0.1",)),
    Case("abalone-n-train-above-rows", ("pipeline", "dataset=abalone", "dataset.n_train=5000"),
         ("n_train=5000", "4177")),
    Case("uci-split-out-of-range", ("pipeline", "dataset=kin40k", "dataset.split=10"),
         ("split=10",)),
    Case("uci-n-train-above-rows", ("pipeline", "dataset=pumadyn32nm", "dataset.n_train=99999"),
         ("n_train=99999", "exceeds")),
    # ------------------------------------------------------------ exact GP too large
    Case("exact-above-max-n", ("pipeline", "algorithm=exact", "dataset=gaussian_bumps",
                               "dataset.n_train=2000000", "algorithm.max_n=20000"),
         ("n_train=2000000", "algorithm.max_n=20000", "GiB")),
    Case("exact-above-memory", ("pipeline", "algorithm=exact", "dataset=gaussian_bumps",
                                "dataset.n_train=2000000"),
         ("n_train=2000000", "GiB of memory but", "available")),
    # ------------------------------------------------------------ CSV files
    Case("csv-missing-file", ("pipeline", "dataset=csv", "dataset.path={dir}/nope.csv"),
         ("nope.csv", "not a readable file")),
    Case("csv-empty-file", ("pipeline", "dataset=csv", "dataset.path={dir}/empty.csv"),
         ("empty.csv", "no data rows"), setup=csv_file("empty.csv", "")),
    Case("csv-non-numeric-column", ("pipeline", "dataset=csv", "dataset.path={dir}/text.csv"),
         ("text.csv", "'a'"), setup=csv_file("text.csv", rows(["a", "b"]))),
    Case("csv-wrong-delimiter", ("pipeline", "dataset=csv", "dataset.path={dir}/semi.csv"),
         ("semi.csv", "'1;2;3'", "delimiter ','"),
         setup=csv_file("semi.csv", "1;2;3\n4;5;6\n7;8;9\n")),
    Case("csv-ragged-rows", ("pipeline", "dataset=csv", "dataset.path={dir}/ragged.csv"),
         ("ragged.csv", "same number of columns"),
         setup=csv_file("ragged.csv", "1,2,3\n4,5\n7,8,9\n")),
    Case("csv-target-column-missing", ("pipeline", "dataset=csv", "dataset.path={dir}/ok.csv",
                                       "dataset.target=5"),
         ("target=5", "3 columns"), setup=csv_file("ok.csv", rows(["1.0"]))),
    Case("csv-one-column", ("pipeline", "dataset=csv", "dataset.path={dir}/one.csv"),
         ("one.csv", "at least 2 rows and 2 columns"),
         setup=csv_file("one.csv", "1\n2\n3\n")),
    Case("csv-test-fraction-above-one", ("pipeline", "dataset=csv", "dataset.path={dir}/ok.csv",
                                         "dataset.test_fraction=1.5"),
         ("test_fraction=1.5",), setup=csv_file("ok.csv", rows(["1.0"]))),
    Case("csv-inf-value", ("pipeline", "dataset=csv", "dataset.path={dir}/inf.csv"),
         ("inf.csv", "NaN/inf", "column 1"), setup=csv_file("inf.csv", rows(["1", "inf"]))),
    Case("csv-column-overflows-standardisation",
         ("pipeline", "dataset=csv", "dataset.path={dir}/huge.csv"),
         ("input column 1 (file column 1)", "standardize_x=false"),
         setup=csv_file("huge.csv", rows(["1e308", "-1e308"]))),
    Case("csv-target-overflows-standardisation",
         ("pipeline", "dataset=csv", "dataset.path={dir}/huge_y.csv",
          "dataset.standardize_y=true"),
         ("the target y (file column 2)", "standardize_y=false"),
         setup=csv_file("huge_y.csv", rows(["1e308", "-1e308"], column=2))),
    Case("csv-column-underflows-standardisation",
         ("pipeline", "dataset=csv", "dataset.path={dir}/tiny.csv"),
         ("input column 1 (file column 1)", "underflows to 0"),
         setup=csv_file("tiny.csv", rows(["1e-320", "3e-320", "5e-320"]))),
    Case("csv-unscaled-inputs-overflow-the-kernel",
         ("pipeline", "dataset=csv", "dataset.path={dir}/big.csv", "dataset.standardize_x=false",
          "kernel=linear", "kappa=3"),
         ("kernel linear()", "NaN/inf", "rescale the inputs"),
         setup=csv_file("big.csv", rows(["1e200", "2e200"]))),
    # ------------------------------------------------------------ stores
    Case("store-root-unwritable", ("pipeline", "dataset=sine1d", "dataset.n_train=41",
                                   "store_root={dir}/ro/stores", "allow_outside_outputs=true"),
         ("store_root=", "ro/stores"), setup=unwritable_dir),  # the cause: by uid
    Case("store-root-is-a-file", ("pipeline", "dataset=sine1d", "dataset.n_train=41",
                                  "store_root={dir}/ok.csv", "allow_outside_outputs=true"),
         ("store_root=", "ok.csv", "File exists"), setup=csv_file("ok.csv", "1,2\n")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_bad_input(case, seed_dir, tmp_path, capfd, monkeypatch):
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


KEGG = Case("exact-keggundirected-points-to-pcg",
            ("pipeline", "algorithm=exact", "dataset=keggundirected"),
            ("algorithm exact: a fit on n_train=57248 (17053 distinct inputs) needs 2.6 GiB of "
             "memory but 2.0 GiB is available; use algorithm=cg (PCG: the same GP by conjugate "
             "gradients in O(n·block) memory",))


@pytest.mark.parametrize("case", params([KEGG]))
def test_exact_too_large_for_memory_points_to_pcg(case, seed_dir, tmp_path, capfd, monkeypatch):
    """keggundirected's 57 248 training rows (split 0) hold 17 053 distinct inputs, which the
    exact GP merges (one 2.6 GiB matrix); with 2 GiB available (made so wherever the test runs)
    the job stops before its data are ingested (no store written), in one line naming PCG as
    the way."""
    import psutil

    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=2 * 2**30))
    run_case(case, seed_dir, tmp_path / "work", capfd, monkeypatch)


# also as real `python -m` commands: a fit whose arithmetic breaks down, a bad CSV file
E2E = ["lam-cholesky-breaks-down", "csv-inf-value"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("case", params(CASES, E2E))
def test_bad_input_as_a_command(case, seed_dir, tmp_path):
    run_command(case, seed_dir, tmp_path / "work")
