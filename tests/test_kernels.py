import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.gaussian_process.kernels import RBF, Matern
from sklearn.metrics.pairwise import polynomial_kernel

from algorithms import KERNELS, ArrayKernelBlocks, InputError, Kernel

rng = np.random.default_rng(3)
A, B = rng.normal(size=(17, 4)), rng.normal(size=(11, 4))
STATIONARY = [name for name, spec in KERNELS.items() if spec.unit_scale is not None]

REFERENCES = {
    "rbf": (Kernel("rbf", {"width": 3.0}), RBF(length_scale=np.sqrt(3.0 / 2))(A, B)),
    "laplacian": (Kernel("laplacian", {"omega": 0.7}), np.exp(-cdist(A, B) / 0.7)),
    "matern32": (Kernel("matern32", {"mu": 0.4}),
                 Matern(length_scale=0.4 * np.sqrt(3), nu=1.5)(A, B)),
    "matern52": (Kernel("matern52", {"mu": 0.4}),
                 Matern(length_scale=0.4 * np.sqrt(5), nu=2.5)(A, B)),
    "linear": (Kernel("linear"), A @ B.T),
    "polynomial": (Kernel("polynomial", {"c": 0.5, "degree": 3}),
                   polynomial_kernel(A, B, degree=3, gamma=1.0, coef0=0.5)),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_kernel_matches_reference(name):
    kernel, ref = REFERENCES[name]
    np.testing.assert_allclose(kernel(A, B), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kernel.diag(A), np.diag(kernel(A, A)), rtol=1e-12, atol=1e-10)


def test_rbf_width_is_two_omega_squared():
    k = Kernel("rbf", {"width": 10.0})
    x, z = np.zeros((1, 1)), np.full((1, 1), 2.0)
    assert k(x, z)[0, 0] == pytest.approx(np.exp(-4.0 / 10.0), rel=1e-15)
    # the default width comes from the KERNELS table (10.0, as conf/kernel/rbf.yaml)
    assert KERNELS["rbf"].params["width"].default == 10.0
    assert Kernel("rbf").params == {"width": 10.0, "variance": 1.0, "lengthscales": None}


@pytest.mark.parametrize("name,scale,unit", [(name, *KERNELS[name].unit_scale)
                                             for name in STATIONARY])
def test_ard_lengthscales_scale_each_input_dimension(name, scale, unit):
    ls = np.array([0.5, 2.0, 3.0, 1.2])
    ard = Kernel(name, {"lengthscales": list(ls), "variance": 2.5})
    assert ard.params[scale] is None and ard.params["lengthscales"] == tuple(ls)
    iso = Kernel(name, {scale: unit})
    np.testing.assert_allclose(ard(A, B), 2.5 * iso(A / ls, B / ls), rtol=1e-13)
    np.testing.assert_allclose(ard.diag(A), np.full(len(A), 2.5))
    # equal length scales are the isotropic kernel (the RBF's width 2ω² = 2ℓ²)
    iso_scale = KERNELS[name].from_length(1.7)
    assert KERNELS[name].to_length(iso_scale) == pytest.approx(1.7, rel=1e-15)
    np.testing.assert_allclose(Kernel(name, {"lengthscales": [1.7] * 4})(A, B),
                               Kernel(name, {scale: iso_scale})(A, B), rtol=1e-13)


def test_rbf_ard_is_the_explicit_formula():
    ls = np.array([0.5, 2.0, 3.0, 1.2])
    K = Kernel("rbf", {"lengthscales": ls.tolist(), "variance": 0.3})(A, B)
    ref = 0.3 * np.exp(-0.5 * (((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1))
    np.testing.assert_allclose(K, ref, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_variance_multiplies_every_kernel(name):
    one, two = Kernel(name), Kernel(name, {"variance": 2.0})
    np.testing.assert_allclose(two(A, B), 2.0 * one(A, B), rtol=1e-14)
    np.testing.assert_allclose(two.diag(A), 2.0 * one.diag(A), rtol=1e-14)


def test_bad_lengthscales_are_one_line_errors():
    for bad in ([], [1.0, -1.0], "abc", [float("nan")], 3.0):
        with pytest.raises(InputError, match=r"kernel 'rbf': kernel\.lengthscales=.* is invalid; "
                                             r"it must be a list of numbers > 0"):
            Kernel("rbf", {"lengthscales": bad})
    with pytest.raises(InputError, match=r"kernel rbf.* has 2 length scales but the inputs "
                                         r"have 4 dimensions"):
        Kernel("rbf", {"lengthscales": [1.0, 2.0]})(A, B)
    with pytest.raises(InputError, match=r"kernel\.width is null and no kernel\.lengthscales"):
        Kernel("rbf", {"width": None})


def test_blocks_are_submatrices():
    kernel = Kernel("matern32", {"mu": 1.0})
    blocks = ArrayKernelBlocks(A, kernel)
    full = kernel(A, A)
    rows, cols = np.array([3, 0, 9]), np.array([1, 16])
    np.testing.assert_allclose(blocks.block(rows, cols), full[np.ix_(rows, cols)], atol=1e-14)
    np.testing.assert_allclose(blocks.diag(), np.diag(full), atol=1e-14)
    np.testing.assert_allclose(blocks.cross(B, cols), kernel(B, A[cols]), atol=1e-14)


@pytest.mark.parametrize("name,params,match", [
    ("gauss", {}, "unknown kernel 'gauss'"),
    ("rbf", {"sigma": 1.0},
     "kernel 'rbf' has no option 'sigma'; its options: lengthscales, variance, width"),
    ("rbf", {"width": -1.0}, r"kernel\.width=-1\.0 is invalid; it must be a number > 0"),
])
def test_bad_kernel_is_one_line_error(name, params, match):
    with pytest.raises(InputError, match=match) as err:
        Kernel(name, params)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name,key,bad", [
    (name, key, bad) for name in sorted(KERNELS) for key in KERNELS[name].params
    if key != "lengthscales"  # a list: test_bad_lengthscales_are_one_line_errors
    for bad in (float("inf"), float("-inf"), float("nan"), "abc", True)
    + (() if KERNELS[name].params[key].none_ok else (None,))])  # null scale: ARD
def test_non_finite_and_non_numeric_parameters_are_refused(name, key, bad):
    with pytest.raises(InputError, match=rf"kernel '{name}': kernel\.{key}=.* is invalid; it "
                                         rf"must be .*e\.g\. kernel\.{key}=") as err:
        Kernel(name, {key: bad})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", STATIONARY)
@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_scale_parameters_must_be_positive(name, bad):
    (key, *_) = KERNELS[name].shape_params
    with pytest.raises(InputError, match=rf"kernel\.{key}=-?[01]\.0 is invalid; it must be a "
                                         "number > 0"):
        Kernel(name, {key: bad})


def test_polynomial_degree_is_a_positive_integer():
    assert Kernel("polynomial", {"degree": 3.0}).params == {"c": 1.0, "degree": 3, "variance": 1.0}
    assert isinstance(Kernel("polynomial").params["degree"], int)
    for bad in (2.5, 0, -1):
        with pytest.raises(InputError, match=rf"kernel\.degree={bad!r} is invalid; it must be "
                                             r"an integer ≥ 1, e\.g\. kernel\.degree=2"):
            Kernel("polynomial", {"degree": bad})
    # an integer power of a negative base is defined (c < 0 no longer gives NaN)
    k = Kernel("polynomial", {"c": -5.0, "degree": 3})
    np.testing.assert_allclose(k(A, B), (A @ B.T - 5.0) ** 3, rtol=1e-12)


OVERFLOWING = [  # (kernel, inputs): every kernel can be made to overflow on finite inputs
    (Kernel("polynomial", {"degree": 400}), A),
    (Kernel("polynomial", {"c": 1e300, "degree": 2}), A),
    (Kernel("linear"), A * 1e200),
    (Kernel("rbf", {"width": 1e-320}), A),
    (Kernel("laplacian", {"omega": 1e-320}), A),
    (Kernel("matern32", {"mu": 1e-320}), A),
]


@pytest.mark.parametrize("kernel,X", OVERFLOWING, ids=lambda v: str(v) if isinstance(v, Kernel)
                         else "")
def test_non_finite_kernel_values_are_refused_by_every_block(kernel, X):
    blocks = ArrayKernelBlocks(X, kernel)
    calls = [lambda: blocks.block(slice(None), slice(None)), lambda: blocks.cross(X, [0, 1, 2]),
             lambda: blocks.block([0, 1], [0, 1])]
    if kernel.name in ("polynomial", "linear"):  # the stationary kernels' diagonal is 1
        calls.append(blocks.diag)
    for call in calls:
        with pytest.raises(InputError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(f"kernel {kernel} is NaN/inf for ") and "\n" not in msg
        assert "pass parameters of moderate size" in msg and "rescale the inputs" in msg
    assert str(Kernel("polynomial", {"degree": 400})) == "polynomial(c=1.0, degree=400)"


def _explicit(name: str, X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """The kernels' formulas written out on broadcast differences (the numpy reference)."""
    diff = X[:, None, :] - Z[None, :, :]
    r2 = (diff ** 2).sum(-1)
    return {"rbf": lambda: np.exp(-r2 / 10.0), "laplacian": lambda: np.exp(-np.sqrt(r2) / 2.0),
            "matern32": lambda: (1 + np.sqrt(r2) / 2.0) * np.exp(-np.sqrt(r2) / 2.0),
            "matern52": lambda: (1 + np.sqrt(r2) / 2.0 + r2 / 12.0) * np.exp(-np.sqrt(r2) / 2.0),
            "linear": lambda: X @ Z.T, "polynomial": lambda: (X @ Z.T + 1.0) ** 2}[name]()


TILED = {"rbf": {"width": 10.0}, "laplacian": {"omega": 2.0}, "matern32": {"mu": 2.0},
         "matern52": {"mu": 2.0}, "linear": {}, "polynomial": {"degree": 2, "c": 1.0}}


@pytest.mark.parametrize("name", sorted(TILED))
@pytest.mark.parametrize("d", [2, 8, 20])
def test_tiled_threaded_blocks_equal_one_evaluation_and_the_formula(name, d):
    """Large blocks are computed in cache-sized row tiles on several threads: the values of
    one untiled evaluation (bit for bit for cdist; GEMM kernels may round the rows at a tile
    edge differently, by ≤ 4 ulp of the block's largest value), and the explicit formula to
    1e-12 relative."""
    from algorithms.kernel_threads import TILE_ENTRIES, use_kernel_threads
    gen = np.random.default_rng(d)
    X, Z = gen.normal(size=(5000, d)) / np.sqrt(d), gen.normal(size=(59, d)) / np.sqrt(d)
    kernel = Kernel(name, TILED[name])
    whole = np.empty((len(X), len(Z)))
    kernel.tile(kernel.rows(X), kernel.cols(Z), whole)  # one tile: the whole block
    for threads in (1, 2):
        with use_kernel_threads(threads):
            K = kernel(X, Z)
        assert K.size > 4 * TILE_ENTRIES  # several tiles
        if name in ("laplacian", "matern32", "matern52"):  # direct differences, row by row
            np.testing.assert_array_equal(K, whole)
        else:
            np.testing.assert_allclose(K, whole, rtol=0,
                                       atol=4 * np.spacing(np.abs(whole).max()))
    ref = _explicit(name, X, Z)
    np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "polynomial"])
@pytest.mark.parametrize("width", [1, 8, 9, 40])
def test_matmul_by_tiles_or_row_blocks_equals_the_dense_product(width, kernel, monkeypatch):
    """ArrayKernelBlocks.matmul: K·V for a narrow V by 2-D tiles (here MATMUL_COLS = 150: two
    whole blocks of columns and a short one; 7-row tiles, the last one short), for a wide one
    (more than MATMUL_NARROW columns) by blocks of K's rows filled tile by tile (tiles of 163
    rows, TILE_ENTRIES // n, blocks of 250: a tile cut at the first block's end, a short last
    block), on 1 and 2 threads (n² is above PARALLEL_ENTRIES: the pool runs them), with numpy's
    exp and with the compiled tail for the RBF."""
    import algorithms.kernel_blocks as kernel_blocks
    from algorithms.kernel_threads import PARALLEL_ENTRIES, tile_rows, use_kernel_threads

    monkeypatch.setattr(kernel_blocks, "MATMUL_COLS", 150)
    monkeypatch.setattr(kernel_blocks, "MATMUL_TILE_BYTES", 8 * 150 * 7)
    assert tile_rows(400) == 163 and 400**2 >= PARALLEL_ENTRIES
    gen = np.random.default_rng(width)
    X, V = gen.normal(size=(400, 4)), gen.normal(size=(400, width))
    params = {"lengthscales": [1.0, 2.0, 0.5, 1.5], "variance": 1.7} if kernel != "polynomial" \
        else {"degree": 3, "variance": 1.7}
    blocks = ArrayKernelBlocks(X, Kernel(kernel, params))
    K = blocks.block(slice(None), slice(None))
    for threads, numpy_exp in ((1, True), (2, True), (2, False)):
        monkeypatch.setattr(kernel_blocks, "NUMPY_EXP_VECTORISED", numpy_exp)
        with use_kernel_threads(threads):
            KV = blocks.matmul(V, block_bytes=8 * 400 * 250)
        np.testing.assert_allclose(KV, K @ V, rtol=1e-12, atol=1e-12 * np.abs(K @ V).max())
    assert (width > kernel_blocks.MATMUL_NARROW) == (width in (9, 40))
    np.testing.assert_allclose(blocks.matmul(V[:, 0]), K @ V[:, 0], rtol=1e-12,
                               atol=1e-12 * np.abs(K @ V[:, 0]).max())


@pytest.mark.parametrize("numpy_exp", [True, False])
def test_an_overflowing_product_is_the_one_line_error(numpy_exp, monkeypatch):
    """K·v whose kernel values are finite but whose sums overflow (variance 1e300, v of 1e10)
    is the one-line overflow error, with either exp, not an inf handed to CG."""
    import algorithms.kernel_blocks as kernel_blocks

    monkeypatch.setattr(kernel_blocks, "NUMPY_EXP_VECTORISED", numpy_exp)
    X = np.random.default_rng(0).normal(size=(300, 2))
    blocks = ArrayKernelBlocks(X, Kernel("rbf", {"width": 2.0, "variance": 1e300}))
    with pytest.raises(InputError, match=r"kernel rbf\(.*NaN/inf for \d+ of 300 values"):
        blocks.matmul(np.full(300, 1e10))


def test_an_overflowing_tile_is_the_one_line_error_on_threads():
    from algorithms.kernel_threads import use_kernel_threads
    X = np.random.default_rng(0).normal(size=(5000, 3)) * 1e3
    with use_kernel_threads(2), \
            pytest.raises(InputError, match=r"NaN/inf for \d+ of 295000 values"):
        Kernel("polynomial", {"degree": 200})(X, X[:59])


def test_the_fused_exp_equals_numpy_and_flags_what_is_not_finite():
    from algorithms import _fused_exp as fused_exp

    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.random(100_000) * 708.0, -rng.random(10_000) * 1e-3,
                        [0.0, -0.0, -1e-300, -707.9999, 2e-16]])
    ref = np.exp(x)
    got = x.copy()
    assert fused_exp.rbf_tail(got, 1.0)
    rel = np.abs(got - ref) / ref
    print(f"\nfused exp vs numpy on [-708, 0]: max relative difference {rel.max():.2e}")
    assert rel.max() < 5e-16
    below = np.array([-708.5, -1e4, -np.inf])
    assert fused_exp.rbf_tail(below, 1.0) and np.all(below == 0.0)  # e^x < 3.4e-308: 0
    for bad in (np.nan, 709.5, np.inf):
        assert not fused_exp.rbf_tail(np.array([-1.0, bad, -2.0]), 1.0)
    out, zeros, huge = np.empty((2, 1)), np.zeros((2, 1)), np.array([[1e200, 0.0], [0, 0]])
    for block in (fused_exp.laplacian_block, fused_exp.matern32_block):
        assert not block(np.array([[np.nan, 0.0], [0.0, 0.0]]), zeros, 1.0, 1.0, out)
    # a distance that overflows to inf: e^-inf = 0 for the Laplacian, (1 + inf)·0 for Matérn
    assert fused_exp.laplacian_block(huge, zeros, 1.0, 1.0, out) and out[0, 0] == 0.0
    assert not fused_exp.matern32_block(huge, zeros, 1.0, 1.0, out)


@pytest.mark.parametrize("name", STATIONARY)
def test_a_block_into_a_strided_output_equals_a_fresh_block(name):
    rng = np.random.default_rng(1)
    kernel = Kernel(name, {"variance": 2.0})
    A, B = rng.standard_normal((300, 3)), rng.standard_normal((40, 3))
    out = np.zeros((300, 50), order="F")[:, 5:45]  # a strided view, as a column buffer
    kernel.block(kernel.rows(A), kernel.cols(B), out=out)
    np.testing.assert_array_equal(out, kernel(A, B))


def test_the_kernel_thread_count_is_scoped_to_its_context_and_thread():
    """``use_kernel_threads`` sets the count for the code inside it, on its own thread only
    (a context variable: a Dask worker's other tasks, an actor's thread and the tiles' own
    pool threads keep theirs), and restores it on leaving, by an error too."""
    import os
    import threading

    from algorithms.kernel_threads import kernel_threads, use_kernel_threads

    seen = {}

    def other():
        seen["other"] = kernel_threads()

    assert kernel_threads() == 1
    with use_kernel_threads(2) as count:
        assert count == kernel_threads() == 2
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        with use_kernel_threads(None):
            assert kernel_threads() == (os.cpu_count() or 1)
        assert kernel_threads() == 2
        with pytest.raises(ValueError), use_kernel_threads(3):
            raise ValueError
        assert kernel_threads() == 2
    assert seen["other"] == 1 and kernel_threads() == 1
    with pytest.raises(InputError, match="at least 1"), use_kernel_threads(0):
        pass


_NUMBA_PROBE = """
import numpy as np
from algorithms import Kernel
X = np.random.default_rng(0).normal(size=(30, 2))
for name in ("rbf", "laplacian", "matern32"):
    assert np.isfinite(Kernel(name)(X, X[:7])).all()
print("ok")
"""


@pytest.mark.parametrize("where", ["xdg", "numba_cache_dir", "unwritable"])
def test_compiled_tiles_are_cached_in_the_user_cache_not_the_source_tree(tmp_path, where):
    """The kernel tiles' compiled code (numba's ``cache=True``) goes to NUMBA_CACHE_DIR if set,
    else $XDG_CACHE_HOME/sparse-gp-bench/numba, never into the source tree; a cache directory
    that cannot be written turns caching off, without a traceback."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]))
    cache = tmp_path / "xdg" / "sparse-gp-bench" / "numba"
    if where == "numba_cache_dir":
        cache = tmp_path / "numba-user"
        env["NUMBA_CACHE_DIR"] = str(cache)
    elif where == "unwritable":
        (tmp_path / "xdg").write_text("a file, not a directory")
    start = time.time() - 1
    proc = subprocess.run([sys.executable, "-c", _NUMBA_PROBE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    cached = [p for p in tmp_path.rglob("*") if p.suffix in (".nbi", ".nbc")]
    in_tree = [Path(d, f) for top in ("algorithms", "pipeline")
               for d, _, files in os.walk(root / top) for f in files
               if f.endswith((".nbi", ".nbc")) and os.path.getmtime(Path(d, f)) >= start]
    assert in_tree == []
    if where == "unwritable":
        assert cached == []
    else:
        assert {p.suffix for p in cached} == {".nbi", ".nbc"}
        assert all(cache in p.parents for p in cached)


def test_numpy_rbf_tail_is_the_compiled_tail():
    """Below algorithms.kernels.WARM_UP_ROWS a job's RBF tiles take numpy's exp: the same
    values to 2.3e-16 relative, and the same verdict on an overflowing or NaN argument."""
    from algorithms._fused_exp import rbf_tail
    from algorithms.kernel_tiles import numpy_rbf_tail

    D = -np.random.default_rng(0).exponential(20.0, 100_000)
    D[:3] = (0.0, -707.9, -708.5)
    a, b = D.copy(), D.copy()
    assert rbf_tail(a, 2.5) and numpy_rbf_tail(b, 2.5)
    assert np.abs(a - b).max() <= 2.3e-16 * np.abs(b).max()
    assert np.all(np.abs(a - b) <= 4.5e-16 * np.abs(b) + 1e-300)
    for bad in (709.5, np.nan):
        a, b = np.array([-1.0, bad]), np.array([-1.0, bad])
        assert not rbf_tail(a, 1.0) and not numpy_rbf_tail(b, 1.0)


def test_a_small_rbf_fit_takes_numpy_exp_whatever_ran_before(monkeypatch):
    """fit_tails decides the exp of one fit: an RBF fit on fewer than WARM_UP_ROWS rows takes
    numpy's, also on the tiles' threads and after the compiled loops were loaded by another
    fit, so the same fit gives the same numbers whatever ran before it in the process."""
    import algorithms.kernel_tiles as kernel_tiles
    from algorithms import run
    from algorithms.kernel_threads import use_kernel_threads
    from algorithms.kernels import fit_tails, warm_up
    from tests.conftest import make_problem

    blocks, y, _, _ = make_problem(n=300)
    with fit_tails("rbf", blocks.n):
        first = run("sgma", blocks, y, lam=0.1, kappa=10, rng=0, eps=0.0, max_basis=30)
    warm_up(["laplacian", "rbf"])  # another fit loaded the compiled loops
    with fit_tails("rbf", blocks.n):
        again = run("sgma", blocks, y, lam=0.1, kappa=10, rng=0, eps=0.0, max_basis=30)
    assert np.array_equal(first.basis, again.basis) and np.array_equal(first.coef, again.coef)

    calls = []
    numpy_tail = kernel_tiles.numpy_rbf_tail
    monkeypatch.setattr(kernel_tiles, "numpy_rbf_tail",
                        lambda out, v: calls.append(out.shape) or numpy_tail(out, v))
    X = np.random.default_rng(0).standard_normal((4000, 3))
    kernel = Kernel("rbf", {"width": 2.0})
    with use_kernel_threads(2), fit_tails("rbf", 100):
        K = kernel(X, X[:59])  # 236 000 values: tiles on two threads
    assert sum(shape[0] for shape in calls) == 4000
    with fit_tails("rbf", 5000):
        compiled = kernel(X, X[:59])
    assert sum(shape[0] for shape in calls) == 4000  # the compiled tail, not numpy's
    assert np.abs(K - compiled).max() <= 1e-15
