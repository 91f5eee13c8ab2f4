"""Threads for kernel tiles and the BLAS: how many threads a job's large kernel blocks use
(:func:`use_kernel_threads`, a context variable), the pool their tiles run on
(:func:`on_threads`, BLAS single-threaded inside), the tile sizes, and the contexts in which
BLAS runs on one thread (:func:`tiles_own_the_cores`, :func:`small_blas`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from threadpoolctl import ThreadpoolController

from algorithms.errors import InputError

TILE_ENTRIES = 1 << 16
# Blocks smaller than this are computed on the calling thread (a thread hand-off costs more).
PARALLEL_ENTRIES = 1 << 17

# the thread count of large kernel blocks, scoped to the job (or task) that set it
# (:func:`use_kernel_threads`): a context variable, so another thread — a Dask worker's next
# task, an actor call, a tile pool's thread — never sees it
_THREADS: contextvars.ContextVar[int] = contextvars.ContextVar("kernel_threads", default=1)
_pools: dict[int, ThreadPoolExecutor] = {}  # one per thread count in use, never shut down
_pools_lock = threading.Lock()
# Modules that load a BLAS of their own: numpy's and scipy's OpenBLAS are two libraries, and a
# scan made before ``scipy.linalg`` is imported does not hold scipy's (a limit then leaves its
# LAPACK and triangular solves multithreaded: SGMA's steps on README's default job took 0.47 s
# against 0.37 s, its CPU 0.89 s against 0.59 s, with a scan made at this module's import).
BLAS_MODULES = ("scipy.linalg", "sklearn", "torch")


def blas_controller() -> ThreadpoolController:
    """The BLAS libraries of this process (threadpoolctl), scanned again only when a module
    of :data:`BLAS_MODULES` has been imported since (a scan costs ~3 ms: a sweep's worker runs
    thousands of jobs)."""
    import scipy.linalg  # noqa: F401  (its OpenBLAS loaded: every job's numerics use it)

    return _controller(_loaded())


def _loaded() -> tuple[bool, ...]:
    """Which of :data:`BLAS_MODULES` are imported now (the key of a scan)."""
    return tuple(name in sys.modules for name in BLAS_MODULES)


@functools.cache
def _controller(loaded: tuple[bool, ...]) -> ThreadpoolController:
    return ThreadpoolController()


# the packages whose wheels ship a BLAS of their own (numpy.libs/, scipy.libs/)
BLAS_OWNERS = ("numpy", "scipy")


def lead_blas(package: str) -> contextlib.AbstractContextManager:
    """A context for a loop whose heavy BLAS calls are ``package``'s (``numpy``: its matmul;
    ``scipy``: scipy.linalg and its BLAS wrappers) and whose calls into the other's BLAS are
    small: the other package's own BLAS (a wheel's copy beside this one's) runs single-threaded
    meanwhile, and ``package``'s own at the most threads any BLAS has now (the job's count,
    also where an enclosing lead put it on one); a BLAS both share (one system or conda
    library) is left as it is. Two OpenBLAS copies with threads each take turns in such a
    loop, and each one's workers spin after its call and take the cores from the other's: PCG
    at n = 2500 on 2 cores, both with 2 threads, 2.74 ms an iteration against 1.37 ms with
    scipy's on one (its only call there is the r × r solve)."""
    if package not in BLAS_OWNERS:
        raise ValueError(f"package={package!r}: pass one of {', '.join(BLAS_OWNERS)}")
    loaded = _loaded()
    own = _owned_blas(package, loaded)
    others = [path for owner in BLAS_OWNERS if owner != package
              for path in _owned_blas(owner, loaded)]
    if not others:
        return contextlib.nullcontext()
    controller = blas_controller()
    threads = max((lib.num_threads for lib in controller.lib_controllers
                   if lib.user_api == "blas"), default=1)
    limits = {**{path: threads for path in own}, **{path: 1 for path in others}}
    return _limits_by_path(controller, limits)


@contextlib.contextmanager
def _limits_by_path(controller: ThreadpoolController, limits: dict[str, int]) -> Iterator[None]:
    """Each library of ``limits`` (by file path) at its thread count, restored after."""
    libs = [lib for lib in controller.lib_controllers if lib.filepath in limits]
    before = [lib.num_threads for lib in libs]
    try:
        for lib in libs:
            lib.set_num_threads(limits[lib.filepath])
        yield
    finally:
        for lib, count in zip(libs, before, strict=True):
            lib.set_num_threads(count)


@functools.cache
def _owned_blas(package: str, loaded: tuple[bool, ...]) -> tuple[str, ...]:
    """The file paths of the BLAS libraries of this process that ``package``'s wheel ships
    (under its directory or its ``<package>.libs`` beside it)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return ()
    root = Path(spec.origin).resolve().parent
    homes = (root, root.with_name(root.name + ".libs"))
    return tuple(lib.filepath for lib in blas_controller().lib_controllers
                 if lib.user_api == "blas"
                 and any(Path(lib.filepath).resolve().is_relative_to(home) for home in homes))


@contextlib.contextmanager
def use_kernel_threads(n: int | None) -> Iterator[int]:
    """Within the context, large kernel blocks computed here are computed on ``n`` threads
    (None: every core); yields the count. Elsewhere (outside it, or on another thread) blocks
    use one thread, or the count of the context around them.

    The job runner enters it with the ``threads`` config, beside the BLAS thread count; inside a
    tile BLAS runs single-threaded, so the two never oversubscribe the cores. The count is read
    on the calling thread and handed to the tiles' pool (:func:`on_threads`); a block computed
    on a pool's thread is computed on that thread alone."""
    count = (os.cpu_count() or 1) if n is None else int(n)
    if count < 1:
        raise InputError(f"kernel threads={n} must be at least 1 (or null: every core)")
    token = _THREADS.set(count)
    try:
        yield count
    finally:
        _THREADS.reset(token)


def kernel_threads() -> int:
    """The number of threads large kernel blocks are computed on here
    (:func:`use_kernel_threads`; 1 outside it)."""
    return _THREADS.get()


def _pool(threads: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if threads not in _pools:
            _pools[threads] = ThreadPoolExecutor(max_workers=threads,
                                                 thread_name_prefix="kernel-tiles")
        return _pools[threads]


def tiles_own_the_cores():
    """A context for a loop whose heavy work is tiled projections (:meth:`ArrayKernelBlocks.
    project`): BLAS runs single-threaded throughout. The tiles are the parallel unit (on
    :func:`kernel_threads` threads), and each BLAS call inside the loop is small (a tile's
    product, a t × κ triangular solve): OpenBLAS's threads cost more in hand-offs there than
    they compute, and its idle workers spin after a multithreaded call and take the cores the
    tiles run on. Measured on 2 cores: SGMA n = 100000, t = 200, 13.1 s with 2 BLAS threads
    against 5.9 s with 1 (two kernel threads) and 9.8 s on one thread; SGMA n = 4000, d = 8,
    κ = 59, 244 basis functions on one kernel thread, 3.14 s with 2 BLAS threads against 0.85 s
    with 1 (n = 2000, d = 2, 100 basis functions: 1.02 s against 0.10 s)."""
    return blas_controller().limit(limits=1, user_api="blas")


SMALL_FACTOR = 4096  # small_blas: a t × t factor up to this t is worked on one BLAS thread


def small_blas(t: int):
    """A context for the LAPACK/BLAS calls on a growing basis's t × t factors (a Cholesky of
    a block of new pivots, triangular solves against the factor so far) made between large
    multithreaded products: one BLAS thread while t ≤ :data:`SMALL_FACTOR`, else no change.
    numpy and scipy each load their own OpenBLAS, and a library's idle threads spin for a
    while after a multithreaded call: a small scipy call between numpy's large products waits
    for the cores the other library's threads hold. Measured on 2 cores, Nyström n = 4000,
    m = 256: its 12 Cholesky factors of blocks of at most 128 pivots took 0.23 s (19 ms each;
    0.17 ms alone), and its 280 triangular solves 0.08 s."""
    if t > SMALL_FACTOR:
        return contextlib.nullcontext()
    return blas_controller().limit(limits=1, user_api="blas")


def l2_bytes(default: int = 1 << 20) -> int:
    """The per-core L2 cache in bytes (Linux sysfs, cpu0), or ``default`` where unreadable."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(root)):
            with open(f"{root}/{index}/level") as level, open(f"{root}/{index}/size") as size:
                if level.read().strip() == "2":
                    text = size.read().strip().upper()
                    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
                    return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


def tile_rows(n_cols: int) -> int:
    """Rows of a tile of ``n_cols`` columns (:data:`TILE_ENTRIES` values)."""
    return max(1, TILE_ENTRIES // max(1, n_cols))


def on_threads(work: Callable[[range], Any], starts: range, entries: int) -> list:
    """``work`` over the tiles' first rows, split into one run per thread (a task per tile
    costs more in hand-offs and GIL traffic than a tile's ~100 µs of work): on this thread
    for one thread or a small block, else on the pool with BLAS single-threaded inside."""
    threads = kernel_threads()
    if threads == 1 or entries < PARALLEL_ENTRIES or len(starts) == 1:
        return [work(starts)]
    runs = [starts[i::threads] for i in range(threads)]
    contexts = [contextvars.copy_context() for _ in runs]  # the caller's context variables
    with blas_controller().limit(limits=1, user_api="blas"):
        return list(_pool(threads).map(lambda ctx, run: ctx.run(work, run), contexts, runs))
