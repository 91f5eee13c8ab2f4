"""GPyTorch as a peer: Titsias's sparse GP regression (SGPR) and Hensman et al.'s stochastic
variational GP (SVGP), as GPyTorch implements them.

Both start (``starts``, :func:`algorithms.peers.start_points`) from the job's kernel and λ
(``given``), from the median heuristic (``median``), from the data-independent standard start
(``standard``: variance 1, every length scale √(d/2), σ² = λ), or from several in turn joined
by '+' (``given+median``), and keep the start with the best final objective: Titsias's bound
(SGPR), the held-out NLPD (SVGP with ``holdout``; without, the last epoch's mean minibatch
ELBO). With ``budget_seconds`` the learning stops at the end of the iteration (SVGP: epoch) in
which its wall seconds passed the budget (``own_stop_reason`` ``budget``, not converged; SGPR
keeps its current state, SVGP its best held-out state) and begins no further start (listed as
not started in ``own_start_summary``; an untrained fit has no budget). Their ``max_basis`` =
m inducing inputs start (``inducing_init``, :mod:`algorithms.inducing_init`) at random
training rows drawn from the job's generator, at k-means centres, or at the rows chosen by
greedy conditional variance at the start's kernel (Burt et al. 2020; Ober et al. 2024
recommend it), the pivots of our ``incomplete_cholesky`` at that kernel and m.
Trained, the summary records ``own_iterations``, ``own_converged``, ``own_stop_reason``
(``relative_change``, ``gradient``, ``no_improvement``: converged; ``cap``: the safety cap;
``budget``: ``budget_seconds``; ``stalled``; ``untrained``), ``own_starts``,
``own_best_start``, every start's score, iterations and stop reason (``own_start_summary``),
and the wall and process-CPU seconds of the whole learning, every start and the inducing
initialisation included
(``own_learning_seconds``, ``own_learning_cpu_seconds``; 0 untrained). The fit's seconds run
until GPyTorch's predictor is ready: each peer makes one predictive call (mean and variance)
on a training row inside the fit, so the prediction caches GPyTorch builds lazily on a user's
first call (SGPR: ``mean_cache`` and ``covar_cache``, O(n·m²); SVGP: the Cholesky factor of
K_ZZ) are timed with the fit (:func:`algorithms.peers.ready_at_last_step`).

``gpytorch_sgpr``: an :class:`gpytorch.models.ExactGP` with zero mean, a
:class:`gpytorch.likelihoods.GaussianLikelihood` and the covariance
``InducingPointKernel(ScaleKernel(RBFKernel / MaternKernel), Z)`` (Titsias 2009), in float64
throughout (every tensor and module made float64 explicitly; torch's global default dtype and
thread count are left as the process has them); the kernel and the noise at the start's.

- ``steps`` = 0: nothing is trained; with ``starts=given`` and Z on training rows the solution
  is a kernel expansion on training rows with the job's kernel and λ and the certificate
  applies.
- ``steps`` > 0: training on the negative of GPyTorch's ``ExactMarginalLogLikelihood`` with
  the InducingPointKernel's added loss term, which is Titsias's collapsed bound
  log N(y | 0, Q + σ²I) − tr(K − Q)/(2σ²), Q = K_XZ K_ZZ⁻¹ K_ZX (divided by n), over the
  kernel's variance and length scale(s), the noise and Z, by ``optimizer``: ``lbfgs`` (the
  default: the bound is deterministic and full-batch, the case for a quasi-Newton method, as
  GPflow's SGPR examples optimise it with scipy's L-BFGS-B and BoTorch's ``fit_gpytorch_mll``
  fits GPyTorch models) — torch's L-BFGS with a strong-Wolfe line search, one iteration per
  step — or ``adam`` at learning rate ``lr`` (0.1, GPyTorch's SGPR example's). It stops
  converged once the bound's relative change |f_k − f_j| / max(|f_k|, |f_j|, 1) (f per row, j
  one L-BFGS iteration or :data:`ADAM_WINDOW` Adam steps back: they oscillate) is at most
  ``elbo_tol``, or the largest component of the gradient of GPyTorch's MLL (per row, over the
  raw parameters) is at most ``grad_tol``: scipy L-BFGS-B's ``ftol`` and ``gtol`` tests and
  default values (:data:`ELBO_TOL` = factr 1e7 × machine ε, :data:`GRAD_TOL`), the ones
  GPflow's ``Scipy`` optimiser and BoTorch's ``fit_gpytorch_mll`` run it with; else after
  ``steps`` iterations (a safety cap). An L-BFGS iteration that did not move (its line search
  found no decrease; torch's L-BFGS would repeat it forever) restarts L-BFGS along the
  gradient; a restart that cannot move ends the training (``stalled``: no decrease even along
  the gradient, a numerically stationary point, where scipy's L-BFGS-B reports
  ABNORMAL_TERMINATION_IN_LNSRCH; counted as converged, the largest gradient component there
  recorded as ``own_final_gradient``). The learned kernel is
  translated back into ours; Z is no longer on training rows (``basis`` then holds the rows
  each inducing input started from, or nearest to) and there is no certificate. The summary
  has ``steps_run`` and the stopping reason.

The trace has a row per training step, 0 (the start) to the last one run, of every start in
turn (``start``: its index): ``elbo`` (n × GPyTorch's MLL, i.e. Titsias's bound), ``noise`` and
the basis size. Prediction is GPyTorch's own, ``likelihood(model(x))`` (noise included), in two
forms (``diagonal_correction``; tests/test_peers.py checks both against dense formulas):

- ``true`` (GPyTorch's default, ``gpytorch.settings.sgpr_diagonal_correction``): GPyTorch adds
  diag(K − Q) (clamped at 0) to the training covariance and k** − Q** to the test prior when it
  predicts (``InducingPointKernel._get_covariance``), so its mean is Q_*X (Q + Λ)⁻¹y with
  Λ = diag(K − Q) + σ²I and its variance k** − Q_*X (Q + Λ)⁻¹ Q_X* + σ²: FITC's predictive
  (Snelson & Ghahramani 2006) at Titsias's hyperparameters, GPyTorch's as its users get it.
- ``false``: Titsias's own predictive (Titsias 2009, eq. 6; the DTC predictive of
  Quiñonero-Candela & Rasmussen 2005, what GPflow's SGPR predicts): mean
  K_*Z (σ²K_ZZ + K_ZX K_XZ)⁻¹ K_ZX y = Q_*X (Q + σ²I)⁻¹y and variance
  k** − Q** + σ² K_*Z (σ²K_ZZ + K_ZX K_XZ)⁻¹ K_Z* + σ². The mean is GPyTorch's with the
  correction off; its variance with the correction off is the subset-of-regressors one,
  Q** − Q_*X (Q + σ²I)⁻¹ Q_X* + σ² (σ² alone far from the inducing inputs: GPyTorch 1.15's
  ``SGPRPredictionStrategy.exact_prediction`` swaps in the base kernel's k** only for a test
  covariance still lazy, which ``ExactGP``'s slice of the joint covariance no longer is), so
  k** − Q** (clamped at 0, Q** = ‖K_*Z R‖² with GPyTorch's own R = K_ZZ^{-1/2}) is added to
  it.

With Z = X (m = n) and no training either is the exact GP.

The mean is held exactly as k(x, Z) @ c (our kernel, the learned one translated back), with c
from GPyTorch's own factors: GPyTorch predicts (K_*Z R)((K_XZ R)ᵀ a), where R = K_ZZ^{-1/2} is
the InducingPointKernel's inverse Cholesky root (``_inducing_inv_root``, jitter included if
GPyTorch had to add any) and a = (Q + Λ)⁻¹y is its prediction strategy's ``mean_cache``; so
c = R (K_XZ R)ᵀ a, and our mean equals GPyTorch's to round-off (≤ 1e-8 in the tests; no
predictor override is needed). The variance is GPyTorch's (plus k** − Q** for the DTC form),
computed in blocks of test rows.
Cost O(n·m²) per step and per prediction, O(n·m) memory beyond X.

``gpytorch_svgp``: GPyTorch's SVGP example in float64: an :class:`gpytorch.models.ApproximateGP`
with a whitened ``VariationalStrategy`` (learned inducing locations) and a
``CholeskyVariationalDistribution`` q(u) = N(m, S) started at the prior (``mean_init_std = 0``,
so torch's global generator is not used), trained by Adam (``lr``) on GPyTorch's
``VariationalELBO``: each epoch a pass over a random permutation of the fitted rows (drawn
from the job's generator) in minibatches of ``batch_size`` rows, the last one smaller, as a
shuffled ``DataLoader`` gives them. The defaults are GPyTorch's SVGP example's (Adam, lr 0.01,
batches of 1024). With ``holdout`` = h > 0 a random share h of the training rows (drawn once,
the same for every start) is held out: after every epoch their mean negative log predictive
density (each row's Gaussian N(μ, σ²_f + σ²)) is computed; training stops once it has not
dropped by more than ``heldout_tol``·max(|best|, 1) below the best for ``patience`` epochs,
once ``min_steps`` Adam steps are run (a start whose held-out NLPD first rises, as from a
kernel learned with a small σ², is not stopped at once)
(early stopping on a validation set, the usual rule for minibatch training), and the state
with the best held-out NLPD is kept; ``epochs`` is then a safety cap. With ``holdout`` = 0
every row is fitted for ``epochs`` epochs. With ``learn_kernel`` (the default) q(u), the
inducing inputs, the kernel and the noise are trained together; without it only q(u) and the
inducing inputs, at the start's kernel and λ (the frontier's shared-kernel mode). GPyTorch
predicts k(x, Z) L⁻ᵀ m with L Lᵀ = K_ZZ + jitter·I (its ``variational_cholesky_jitter``, 1e-6
in float64, recorded as ``jitter``), so c = L⁻ᵀ m; its predictive variance (the same jitter
added to k(x, x)) is GPyTorch's. The trace has the minibatch ELBO (times the fitted rows /
batch, ``elbo_batch``) per step and the held-out NLPD at each epoch's last step
(``heldout_nlpd``); the summary ``steps_run``, ``epochs`` (run) and ``heldout_rows``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Solution, block_rows
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.inducing_init import INDUCING_INITS, initial_inducing
from algorithms.kernels import Kernel
from algorithms.options import Option
from algorithms.peers import (
    BUDGET_OPTION,
    GPYTORCH,
    TORCH,
    Clock,
    check_translatable,
    gpytorch_kernel,
    import_gpytorch,
    kernel_from_gpytorch,
    library_warnings,
    over_budget,
    ready_at_last_step,
    start_points,
    starts_option,
    torch_linalg_errors,
    torch_threads,
)

ADAM_WINDOW = 10  # Adam steps over which the bound's change is measured (module docstring)
ELBO_TOL = 2.220446049250313e-09  # scipy L-BFGS-B's default ftol (factr 1e7 × machine ε)
GRAD_TOL = 1e-5  # scipy L-BFGS-B's default gtol (pgtol)
SGPR_OWN_CAP = 2000  # the own protocol's safety cap on L-BFGS iterations
SVGP_OWN_CAP = 1000  # the own protocol's safety cap on epochs
PATIENCE = 10  # SVGP: epochs without a held-out improvement before it stops
HELDOUT_TOL = 1e-4  # SVGP: the relative drop of the held-out NLPD that counts as one
HELDOUT_BLOCK = 4096  # held-out rows per prediction block
MIN_STEPS = 1000  # SVGP: Adam steps before the held-out rule may stop it (GPyTorch's example
# trains 1360 steps on 3droad)
# own_stop_reason of a converged training ("stalled": numerically stationary, module docstring)
CONVERGED = ("relative_change", "gradient", "stalled", "no_improvement")
NOISE_FLOOR = 1e-4  # GaussianLikelihood's default lower bound on the noise, lowered for a lam below
JITTER = re.compile(r"added jitter of ([0-9.eE+-]+)")


@functools.cache
def sgpr_model() -> type:
    """The GPyTorch model class (built on first use: GPyTorch is imported only then)."""
    _, gpytorch = import_gpytorch()

    class SGPR(gpytorch.models.ExactGP):
        """Zero mean, InducingPointKernel covariance (GPyTorch's SGPR example)."""

        def __init__(self, X, y, likelihood, base, Z) -> None:
            super().__init__(X, y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                base, inducing_points=Z, likelihood=likelihood)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    return SGPR


@functools.cache
def svgp_model() -> type:
    """GPyTorch's SVGP model class: ApproximateGP, whitened VariationalStrategy with learned
    inducing locations, CholeskyVariationalDistribution (GPyTorch's SVGP example)."""
    _, gpytorch = import_gpytorch()

    class SVGP(gpytorch.models.ApproximateGP):
        """Zero mean; q(u) = N(m, S) whitened by the Cholesky factor of K_ZZ + jitter."""

        def __init__(self, base, Z) -> None:
            # mean_init_std = 0: q(u) starts at the prior without torch's global generator
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.size(0),
                                                                     mean_init_std=0.0)
            strategy = gpytorch.variational.VariationalStrategy(self, Z, q,
                                                                learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = base

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    return SVGP


def _library() -> str:
    torch, gpytorch = import_gpytorch()
    return f"GPyTorch {gpytorch.__version__}, PyTorch {torch.__version__}"


def _jitter(caught: list[str]) -> float:
    """The largest jitter GPyTorch reports adding to a diagonal (0 if none)."""
    return max((float(m.group(1)) for text in caught if (m := JITTER.search(text))),
               default=0.0)


def peer_device(blocks: KernelBlocks):
    """The torch device of the job's kernel blocks (:mod:`algorithms.torch_blocks`: a GPU, or
    ``torch:cpu``), where GPyTorch then trains and predicts; None on the numpy path
    (GPyTorch's default, the CPU)."""
    return blocks.device


def _likelihood(torch, gpytorch, lam: float, device):
    """GPyTorch's Gaussian likelihood in float64 with noise σ² = ``lam`` (its lower bound
    lowered below a small lam), on ``device``."""
    likelihood = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(min(NOISE_FLOOR, lam / 10))
    ).double()
    likelihood.noise = torch.tensor(lam, dtype=torch.float64)
    return likelihood.to(device)


def _variance_bounds(torch, model, likelihood, m: int, setting: Callable[[], Any], device,
                     added: Callable[[Any], Any] | None = None):
    """GPyTorch's predictive variance of y, ``likelihood(model(x)).variance``, under
    ``setting()`` (a GPyTorch settings context), plus ``added(x)`` where given (SGPR's DTC
    form: k** − Q**), in blocks of test rows on ``device``."""
    batch = block_rows(max(m, 1))

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X_new = np.asarray(X_new, dtype=np.float64)
        var = np.empty(len(X_new))
        with library_warnings([]), torch_threads(torch), torch.no_grad(), setting():
            for lo in range(0, len(X_new), batch):
                x = torch.as_tensor(X_new[lo: lo + batch], dtype=torch.float64, device=device)
                block = likelihood(model(x)).variance
                if added is not None:
                    block = block + added(x)
                var[lo: lo + batch] = block.cpu().numpy()
        if not np.isfinite(var).all():
            raise FloatingPointError("GPyTorch's predictive variance is NaN/inf")
        return var, var

    return variance_bounds


def _summary(m: int, stop: str, steps: int, kernel, noise: float, caught: list[str],
             reasons: dict[str, str]) -> dict[str, Any]:
    """The summary keys both GPyTorch peers share; adds the no-certificate reason to
    ``reasons`` when anything was trained."""
    if steps:
        reasons["gap_certified"] = ("no certificate: the inducing inputs (and the kernel "
                                    "and noise, unless fixed) were trained")
    return {"n_basis": m, "objective": math.nan, "gap": math.nan, "stop_reason": stop,
            "learned_kernel": str(kernel), "learned_lam": noise, "inducing_moved": bool(steps),
            "library": _library(), "library_warnings": len(caught),
            "first_warning": caught[0] if caught else ""}


@dataclass
class Trained:
    """One start's outcome: its model and likelihood, the objective it is compared by
    (higher is better), how far it ran and why it stopped."""

    label: str
    kernel: Kernel  # the start's kernel and σ²
    noise: float
    model: Any
    likelihood: Any
    base: Any
    rows: np.ndarray
    note: str
    score: float
    iterations: int  # SGPR: L-BFGS iterations or Adam steps; SVGP: epochs
    stop: str  # own_stop_reason: relative_change, gradient, no_improvement, cap, stalled, untrained
    text: str  # the stopping reason in words
    steps: int  # SGPR: L-BFGS restarts along the gradient; SVGP: Adam steps
    gradient: float = math.nan  # SGPR: the largest gradient component at the last evaluation

    @property
    def converged(self) -> bool:
        return self.stop in CONVERGED


def _train_starts(points: list[tuple[str, Kernel, float]],
                  train: Callable[[int, str, Kernel, float], Trained], clock: Clock,
                  budget: float | None) -> tuple[list[Trained], list[str]]:
    """Each start of ``points`` trained in turn by ``train(index, label, kernel, σ²)``; once
    the learning has run past ``budget`` seconds no further start begins: (the runs, the
    labels of the starts not begun)."""
    runs: list[Trained] = []
    skipped: list[str] = []
    for index, (label, kernel, noise) in enumerate(points):
        if runs and over_budget(clock, budget):
            skipped.append(label)
        else:
            runs.append(train(index, label, kernel, noise))
    return runs, skipped


def _own_summary(runs: list[Trained], best: int, clock: Clock | None,
                 skipped: list[str]) -> dict[str, Any]:
    """The own-protocol keys of a trained peer's summary (the kept start's iterations,
    convergence and stop reason; every start's in ``own_start_summary``, with the starts the
    budget left unbegun)."""
    chosen = runs[best]
    # a start not begun for the budget: the learning stopped for it, whichever run is kept
    stop = "budget" if skipped and clock is not None else chosen.stop
    return {"own_iterations": chosen.iterations,
            "own_converged": chosen.converged and stop == chosen.stop,
            "own_stop_reason": stop, "own_starts": len(runs),
            "own_best_start": chosen.label,
            "own_iterations_total": sum(r.iterations for r in runs),
            "own_start_summary": "; ".join(
                [f"{r.label}: score {r.score:.10g}, {r.iterations} iterations, {r.stop}"
                 for r in runs] + [f"{label}: not started (budget)" for label in skipped]),
            "own_learning_seconds": clock.wall if clock else 0.0,
            "own_learning_cpu_seconds": clock.cpu if clock else 0.0,
            "inducing_init": chosen.note, "own_final_gradient": chosen.gradient}


def fit_sgpr(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
             recorder: Recorder, max_basis: int, steps: int, optimizer: str, lr: float,
             elbo_tol: float, grad_tol: float, diagonal_correction: bool, inducing_init: str,
             starts: str, budget_seconds: float | None = None) -> Solution:
    """GPyTorch's SGPR on ``max_basis`` inducing inputs started by ``inducing_init``, from each
    of ``starts``, trained by ``optimizer`` (L-BFGS or Adam at learning rate ``lr``) for at
    most ``steps`` iterations, stopped once the bound's relative change is at most ``elbo_tol``
    or its largest gradient component at most ``grad_tol``, or at the end of the iteration in
    which the learning passed ``budget_seconds``; the best final bound is kept (module
    docstring)."""
    owner = "algorithm gpytorch_sgpr"
    check_translatable(blocks.kernel, owner)
    settings = SgprSettings(steps, optimizer, lr, elbo_tol, grad_tol, owner, budget_seconds)
    try:
        return _fit_sgpr(blocks, y, lam, rng, recorder, max_basis, settings,
                         diagonal_correction, inducing_init, starts)
    except torch_linalg_errors() as err:  # the evaluator's one-line error for a breakdown
        raise np.linalg.LinAlgError(" ".join(str(err).split())[:100]) from None


def _relative_change(bounds: list[float], optimizer: str, n: int) -> float | None:
    """The bound's relative change over one L-BFGS iteration (over :data:`ADAM_WINDOW` Adam
    steps, whose steps oscillate), scipy's L-BFGS-B ``ftol`` measure on the per-datum loss:
    |f_k − f_j| / max(|f_k|, |f_j|, 1); None before there is one."""
    back = ADAM_WINDOW if optimizer == "adam" else 1
    if len(bounds) <= back:
        return None
    a, b = bounds[-1] / n, bounds[-1 - back] / n
    return abs(a - b) / max(abs(a), abs(b), 1.0)


def _fit_sgpr(blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
              recorder: Recorder, max_basis: int, settings: SgprSettings,
              diagonal_correction: bool, inducing_init: str, starts: str) -> Solution:
    torch, gpytorch = import_gpytorch()
    f64, device = torch.float64, peer_device(blocks)
    steps = settings.steps
    m = min(max_basis, blocks.n)
    X = blocks.inputs(slice(None))
    tX, ty = (torch.tensor(X, dtype=f64, device=device),
              torch.tensor(y, dtype=f64, device=device))  # copies
    caught: list[str] = []
    clock = Clock(recorder)
    points = start_points(starts, blocks.kernel, lam, X, y, rng)
    with library_warnings(caught), torch_threads(torch):
        runs, skipped = _train_starts(
            points, lambda index, label, kernel, noise: _train_sgpr(
                torch, gpytorch, X, tX, ty, kernel, noise, m, inducing_init, rng, recorder,
                label, index, settings, device, clock), clock, settings.budget if steps else None)
        best = max(range(len(runs)), key=lambda i: runs[i].score)
        clock.stop()
        kept = runs[best]
        model, likelihood, base = kept.model, kept.likelihood, kept.base
        model.eval()
        likelihood.eval()
        setting = gpytorch.settings.sgpr_diagonal_correction(diagonal_correction)
        with torch_threads(torch), torch.no_grad(), setting:
            # a user's first predictive call (mean and variance): GPyTorch builds its
            # prediction caches (mean_cache, covar_cache) here, timed with the fit
            _ = likelihood(model(tX[:1])).variance
            inducing = model.covar_module
            a = model.prediction_strategy.mean_cache  # (Q + Λ)⁻¹ y
            R = inducing._inducing_inv_root  # K_ZZ^{-1/2}, the factor GPyTorch predicts with
            K_XZ = inducing.base_kernel(tX, inducing.inducing_points).to_dense()
            coef = (R @ (R.mT @ (K_XZ.mT @ a))).cpu().numpy()  # R (K_XZ R)ᵀ a in O(n·m)
            Z = inducing.inducing_points.detach().cpu().numpy().copy()
    ready_at_last_step(recorder)
    noise = float(likelihood.noise.detach())
    if steps:
        kernel, lam_fit = kernel_from_gpytorch(blocks.kernel.name, base), noise
    else:  # untrained: the start's kernel and σ², GPyTorch's to round-off
        kernel, lam_fit = kept.kernel, kept.noise
    variance_bounds = _variance_bounds(
        torch, model, likelihood, m,
        lambda: gpytorch.settings.sgpr_diagonal_correction(diagonal_correction), device,
        None if diagonal_correction else _dtc_term(torch, inducing))
    reasons = {"objective": "GPyTorch optimises Titsias's bound (elbo), not L(α)",
               "gap": "GPyTorch solves no dual problem (no duality gap)"}
    if not steps and (inducing_init == "kmeans" or kept.label != "given"):
        reasons["gap_certified"] = ("no certificate: the inducing inputs are k-means centres, "
                                    "or the kernel and lam are the median start's")
    summary = {**_summary(m, kept.text, steps, kernel, noise, caught, reasons),
               "jitter": _jitter(caught), "elbo": kept.score, "steps_run": kept.iterations,
               "lbfgs_restarts": kept.steps,
               **_own_summary(runs, best, clock if steps else None, skipped)}
    return Solution(kept.rows, coef, Z, kernel, lam_fit, summary, variance_bounds,
                    not_applicable=reasons)


def _dtc_term(torch, inducing) -> Callable[[Any], Any]:
    """x ↦ k(x, x) − Q(x, x), clamped at 0, with Q(x, x) = ‖k(x, Z) R‖² from the
    InducingPointKernel's own R = K_ZZ^{-1/2} (its eval-mode cache): what turns GPyTorch's
    variance without the diagonal correction (subset of regressors) into Titsias's DTC one
    (module docstring)."""

    def term(x):
        kxx = inducing.base_kernel(x, diag=True)
        root = inducing.base_kernel(x, inducing.inducing_points).to_dense() \
            @ inducing._inducing_inv_root
        return (kxx - (root**2).sum(-1)).clamp_min(0.0)

    return term


@dataclass(frozen=True)
class SgprSettings:
    """SGPR's training options (:func:`fit_sgpr`)."""

    steps: int
    optimizer: str
    lr: float
    elbo_tol: float
    grad_tol: float
    owner: str
    budget: float | None = None  # budget_seconds


def _finite_bound(bound: float, step: int, s: SgprSettings) -> float:
    """The bound, or the error of a training that made it NaN/inf (at the start: a
    FloatingPointError the evaluator reports; later: the step size's one line)."""
    if math.isfinite(bound):
        return bound
    if step == 0:
        raise FloatingPointError("GPyTorch's marginal likelihood is NaN/inf")
    raise InputError(f"{s.owner}: GPyTorch's marginal likelihood became NaN/inf at "
                     f"{s.optimizer} step {step} with algorithm.lr={s.lr:g}; pass "
                     "a smaller algorithm.lr or fewer algorithm.steps")


def _train_sgpr(torch, gpytorch, X: np.ndarray, tX, ty, kernel: Kernel, noise: float, m: int,
                inducing_init: str, rng: np.random.Generator, recorder: Recorder, label: str,
                index: int, s: SgprSettings, device, clock: Clock) -> Trained:
    """One start of SGPR: inducing inputs by ``inducing_init`` at ``kernel``, then training
    on Titsias's bound until a stopping rule (module docstring); past ``s.budget`` seconds of
    ``clock`` the bound is evaluated at the current state and the training ends there."""
    n = len(X)
    Z0, rows, note = initial_inducing(X, kernel, m, inducing_init, rng)
    likelihood = _likelihood(torch, gpytorch, noise, device)
    base = gpytorch_kernel(kernel, X.shape[1], s.owner).to(device)
    model = sgpr_model()(tX, ty, likelihood, base,
                         torch.tensor(Z0, dtype=torch.float64, device=device)).double()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    params = list(model.parameters())
    optimizer = _optimizer(torch, params, s)
    pending: list = []  # the loss at the current point: the L-BFGS step's first evaluation

    def closure():
        if pending:  # evaluated (with its gradient) by the loop just before this step
            return pending.pop()
        optimizer.zero_grad()
        loss = -mll(model(tX), ty)
        loss.backward()
        return loss

    bounds: list[float] = []
    restarts, restarted, stop, measure, last_gradient = 0, False, "", math.nan, math.nan
    model.train()
    likelihood.train()
    for step in range(s.steps + 1):
        spent = step < s.steps and over_budget(clock, s.budget)
        training = step < s.steps and not spent
        optimizer.zero_grad()
        with torch.set_grad_enabled(training):
            value = mll(model(tX), ty)
        bound = _finite_bound(float(value.detach()) * n, step, s)
        gradient = math.nan
        if training:
            (-value).backward()
            gradient = max(float(p.grad.abs().max()) for p in params if p.grad is not None)
            last_gradient = gradient
        bounds.append(bound)
        recorder.step(n_basis=m, objective=math.nan, gap=math.nan, elbo=bound,
                      noise=float(likelihood.noise.detach()), start=index)
        if s.optimizer == "lbfgs" and step and bounds[-1] == bounds[-2]:
            # the last iteration did not move: its line search found no decrease along the
            # quasi-Newton direction. Restart from steepest descent (the curvature history
            # dropped); a restart that cannot move either ends the training.
            if restarted:
                stop = "stalled"
                break
            optimizer.state.clear()
            restarts += 1
            restarted = True
        else:
            restarted = False
            change = _relative_change(bounds, s.optimizer, n)
            if s.elbo_tol > 0 and change is not None and change <= s.elbo_tol:
                stop, measure = "relative_change", change
            elif s.grad_tol > 0 and gradient <= s.grad_tol:
                stop, measure = "gradient", gradient
        if spent and not stop:
            stop = "budget"
        if stop or not training:
            break
        if s.optimizer == "adam":
            optimizer.step()
        else:
            pending.append(-value.detach())
            optimizer.step(closure)
    run = len(bounds) - 1
    stop = stop or ("cap" if s.steps else "untrained")
    text = _stop_text(stop, run, measure, last_gradient, s)
    return Trained(label, kernel, noise, model, likelihood, base, rows, note, bound, run, stop,
                   f"{text}; start {label}, {note}", restarts, last_gradient)


def _optimizer(torch, params: list, s: SgprSettings):
    """Adam at ``s.lr``, or one L-BFGS iteration (with its strong-Wolfe line search) a step."""
    if s.optimizer == "adam":
        return torch.optim.Adam(params, lr=s.lr)
    return torch.optim.LBFGS(params, lr=1.0, max_iter=1, line_search_fn="strong_wolfe")


def _stop_text(stop: str, run: int, measure: float, last_gradient: float,
               s: SgprSettings) -> str:
    """Why the training of one start ended, in words, after ``run`` steps."""
    how = "L-BFGS iterations" if s.optimizer == "lbfgs" else f"Adam steps (lr={s.lr:g})"
    return {
        "untrained": "no training (steps = 0): the start's kernel and lam, the inducing rows",
        "stalled": (f"converged (stalled): L-BFGS's line search found no decrease after {run} "
                    "iterations, from its restart along the gradient too (largest gradient "
                    f"component {last_gradient:.2g})"),
        "relative_change": (f"converged: the bound's relative change {measure:.2g} ≤ "
                            f"elbo_tol={s.elbo_tol:g} after {run} {how}"),
        "gradient": (f"converged: the largest gradient component {measure:.2g} ≤ "
                     f"grad_tol={s.grad_tol:g} after {run} {how}"),
        "cap": f"steps = {s.steps} {how} reached (the cap) on Titsias's bound",
        "budget": (f"budget_seconds={s.budget} passed after {run} {how} on Titsias's bound "
                   "(not converged; the current state kept)"),
    }[stop]


def fit_svgp(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
             recorder: Recorder, max_basis: int, epochs: int, lr: float, batch_size: int,
             learn_kernel: bool, holdout: float, patience: int, heldout_tol: float,
             min_steps: int, inducing_init: str, starts: str,
             budget_seconds: float | None = None) -> Solution:
    """GPyTorch's SVGP (Hensman et al. 2013) on ``max_basis`` inducing inputs started by
    ``inducing_init``: Adam at learning rate ``lr`` on GPyTorch's VariationalELBO for at most
    ``epochs`` passes over the shuffled training rows in minibatches of ``batch_size``,
    training q(u), the inducing inputs and (``learn_kernel``) the kernel and the noise; with
    ``holdout`` > 0 that share of the training rows is held out and training stops once
    their mean negative log predictive density has not improved by ``heldout_tol`` (relative)
    for ``patience`` epochs, after at least ``min_steps`` Adam steps, the best state kept, or
    at the end of the epoch in which the learning passed ``budget_seconds``; from each of
    ``starts`` (module docstring)."""
    owner = "algorithm gpytorch_svgp"
    check_translatable(blocks.kernel, owner)
    n = blocks.n
    if holdout and not 1 <= round(holdout * n) < n:
        raise InputError(f"{owner}: holdout={holdout:g} of n_train={n} rows holds out "
                         f"{round(holdout * n)}; pass a holdout that keeps at least one row "
                         "on each side, or holdout=0")
    settings = SvgpSettings(epochs, lr, batch_size, learn_kernel, holdout, patience, min_steps,
                            heldout_tol, owner, budget_seconds)
    try:
        return _fit_svgp(blocks, y, lam, rng, recorder, max_basis, settings, inducing_init,
                         starts)
    except torch_linalg_errors() as err:
        raise np.linalg.LinAlgError(" ".join(str(err).split())[:100]) from None


@dataclass(frozen=True)
class SvgpSettings:
    """SVGP's training options (:func:`fit_svgp`)."""

    epochs: int
    lr: float
    batch_size: int
    learn_kernel: bool
    holdout: float
    patience: int
    min_steps: int
    heldout_tol: float
    owner: str
    budget: float | None = None  # budget_seconds


def _fit_svgp(blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
              recorder: Recorder, max_basis: int, s: SvgpSettings, inducing_init: str,
              starts: str) -> Solution:
    torch, gpytorch = import_gpytorch()
    f64, device = torch.float64, peer_device(blocks)
    n = blocks.n
    X = blocks.inputs(slice(None))
    tX, ty = (torch.tensor(X, dtype=f64, device=device),
              torch.tensor(y, dtype=f64, device=device))  # copies
    held = round(s.holdout * n) if s.holdout else 0
    order = rng.permutation(n) if held else np.arange(n)
    fit_rows, held_rows = np.sort(order[held:]), np.sort(order[:held])
    m = min(max_basis, len(fit_rows))
    caught: list[str] = []
    clock = Clock(recorder)
    points = start_points(starts, blocks.kernel, lam, X[fit_rows], y[fit_rows], rng)
    with library_warnings(caught), torch_threads(torch):
        runs, skipped = _train_starts(
            points, lambda index, label, kernel, noise: _train_svgp(
                torch, gpytorch, X, tX, ty, fit_rows, held_rows, kernel, noise, m,
                inducing_init, rng, recorder, label, index, s, device, clock),
            clock, s.budget if s.epochs else None)
        best = max(range(len(runs)), key=lambda i: runs[i].score)
        clock.stop()
        kept = runs[best]
        model, likelihood, base = kept.model, kept.likelihood, kept.base
        model.eval()
        likelihood.eval()
        with torch_threads(torch), torch.no_grad():
            strategy = model.variational_strategy
            Z = strategy.inducing_points
            # GPyTorch predicts k(x, Z) L⁻ᵀ m with L L^T = K_ZZ + jitter·I (whitened q(u))
            K_ZZ = base(Z, Z).to_dense()
            K_ZZ = K_ZZ + strategy.jitter_val * torch.eye(m, dtype=f64, device=device)
            L = torch.linalg.cholesky(K_ZZ)
            mean_u = strategy._variational_distribution.variational_mean
            coef = torch.linalg.solve_triangular(L.mT, mean_u.unsqueeze(-1),
                                                 upper=True).squeeze(-1).cpu().numpy()
            Z = Z.detach().cpu().numpy().copy()
            # a user's first predictive call: GPyTorch caches the factor of K_ZZ, timed here
            _ = likelihood(model(tX[:1])).variance
    ready_at_last_step(recorder)
    noise = float(likelihood.noise.detach())
    learned = bool(s.epochs) and s.learn_kernel
    kernel = kernel_from_gpytorch(blocks.kernel.name, base) if learned else kept.kernel
    lam_fit = noise if learned else kept.noise
    variance_bounds = _variance_bounds(torch, model, likelihood, m, contextlib.nullcontext,
                                       device)
    reasons = {"objective": "GPyTorch optimises the variational ELBO, not L(α)",
               "gap": "GPyTorch solves no dual problem (no duality gap)"}
    summary = {**_summary(m, kept.text, s.epochs, kernel, lam_fit, caught, reasons),
               "jitter": float(strategy.jitter_val), "steps_run": kept.steps,
               "epochs": kept.iterations, "heldout_rows": held,
               **_own_summary(runs, best, clock if s.epochs else None, skipped)}
    return Solution(kept.rows, coef, Z, kernel, lam_fit, summary, variance_bounds,
                    not_applicable=reasons)


def _heldout_nlpd(torch, model, likelihood, tX, ty, rows: np.ndarray) -> float:
    """The mean negative log predictive density of the held-out ``rows`` (their marginal
    Gaussians N(μ, σ²_f + σ²)), in blocks of rows; the model is left in training mode."""
    model.eval()
    likelihood.eval()
    total = 0.0
    with torch.no_grad():
        for lo in range(0, len(rows), HELDOUT_BLOCK):
            take = torch.as_tensor(rows[lo: lo + HELDOUT_BLOCK], device=tX.device)
            f = model(tX[take])
            var = f.variance + likelihood.noise
            total += float((0.5 * torch.log(2 * math.pi * var)
                            + 0.5 * (ty[take] - f.mean) ** 2 / var).sum())
    model.train()
    likelihood.train()
    return total / len(rows)


def _train_svgp(torch, gpytorch, X: np.ndarray, tX, ty, fit_rows: np.ndarray,
                held_rows: np.ndarray, kernel: Kernel, noise: float, m: int,
                inducing_init: str, rng: np.random.Generator, recorder: Recorder, label: str,
                index: int, s: SvgpSettings, device, clock: Clock) -> Trained:
    """One start of SVGP: inducing inputs by ``inducing_init`` on the fitted rows, then Adam
    epochs until the held-out rule stops it (module docstring), ``epochs`` are run or the
    epoch in which ``clock`` passed ``s.budget`` seconds ends."""
    n_fit = len(fit_rows)
    batch = min(s.batch_size, n_fit)
    Z0, rows, note = initial_inducing(X[fit_rows], kernel, m, inducing_init, rng)
    likelihood = _likelihood(torch, gpytorch, noise, device)
    base = gpytorch_kernel(kernel, X.shape[1], s.owner).to(device)
    model = svgp_model()(base, torch.tensor(Z0, dtype=torch.float64, device=device)).double()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n_fit)
    trained = ([*model.parameters(), *likelihood.parameters()] if s.learn_kernel else
               [*model.variational_strategy.parameters()])  # q(u) and Z only
    optimizer = torch.optim.Adam(trained, lr=s.lr)
    model.train()
    likelihood.train()
    recorder.step(n_basis=m, objective=math.nan, gap=math.nan, elbo_batch=math.nan,
                  heldout_nlpd=math.nan, noise=float(likelihood.noise.detach()), start=index)
    step, epoch, stop, waited = 0, 0, "", 0
    best, best_epoch, state = math.inf, 0, None
    batch_elbos: list[float] = []
    while epoch < s.epochs and not stop:
        order = fit_rows[rng.permutation(n_fit)]
        epoch += 1
        batch_elbos = []
        for lo in range(0, n_fit, batch):
            step += 1
            take = torch.as_tensor(order[lo: lo + batch], device=tX.device)
            optimizer.zero_grad()
            value = elbo(model(tX[take]), ty[take])
            if not math.isfinite(float(value.detach())):
                raise InputError(f"{s.owner}: GPyTorch's ELBO became NaN/inf at Adam step "
                                 f"{step} (epoch {epoch}) with algorithm.lr={s.lr:g}; "
                                 "pass a smaller algorithm.lr or fewer algorithm.epochs")
            (-value).backward()
            optimizer.step()
            batch_elbos.append(float(value.detach()))
            last = lo + batch >= n_fit
            heldout = (_heldout_nlpd(torch, model, likelihood, tX, ty, held_rows)
                       if last and len(held_rows) else math.nan)
            recorder.step(n_basis=m, objective=math.nan, gap=math.nan,
                          elbo_batch=batch_elbos[-1] * n_fit, heldout_nlpd=heldout,
                          noise=float(likelihood.noise.detach()), start=index)
        if len(held_rows):
            if heldout < best - s.heldout_tol * max(abs(best), 1.0) or state is None:
                best, best_epoch, waited = heldout, epoch, 0
                state = _snapshot(model, likelihood)
            else:
                waited += 1
                stop = ("no_improvement" if waited >= s.patience and step >= s.min_steps
                        else "")
        if not stop and epoch < s.epochs and over_budget(clock, s.budget):
            stop = "budget"
    if state is not None and best_epoch != epoch:  # the best held-out state, not the last
        model.load_state_dict(state[0])
        likelihood.load_state_dict(state[1])
    stop = stop or ("cap" if s.epochs else "untrained")
    what = "q(u), Z, kernel and noise" if s.learn_kernel else "q(u) and Z at the start's kernel"
    held = (f"; best held-out NLPD {best:.4g} at epoch {best_epoch} of {len(held_rows)} "
            "held-out rows" if len(held_rows) else "")
    text = {
        "untrained": "no training (epochs = 0): q(u) is the prior, the mean is 0",
        "no_improvement": (f"converged: the held-out NLPD did not improve by heldout_tol="
                           f"{s.heldout_tol:g} (relative) for patience={s.patience} epochs, "
                           f"after at least min_steps={s.min_steps} steps"),
        "cap": f"epochs = {s.epochs} reached (the cap)",
        "budget": (f"budget_seconds={s.budget} passed in epoch {epoch} (not converged"
                   + ("; the best held-out state kept)" if len(held_rows) else ")")),
    }[stop] + (f"; {epoch} epochs of Adam (lr={s.lr:g}, batches of {batch}: {step} steps) on "
               f"the ELBO over {what}{held}; start {label}, {note}")
    if len(held_rows):
        score = -best
    else:  # no held-out rows: the last epoch's mean minibatch ELBO (per row)
        score = float(np.mean(batch_elbos)) if batch_elbos else -math.inf
    return Trained(label, kernel, noise, model, likelihood, base, fit_rows[rows], note, score,
                   epoch, stop, text, step)


def _snapshot(model, likelihood) -> tuple[dict, dict]:
    """Copies of the model's and the likelihood's state (the best held-out state so far)."""
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            {k: v.detach().clone() for k, v in likelihood.state_dict().items()})


INIT_OPTION = Option("random", "choice", "where the inducing inputs start: random training "
                     "rows, kmeans (scikit-learn's k-means centres) or greedy_variance (greedy "
                     "conditional variance = pivoted Cholesky of K at the start's kernel; Burt "
                     "et al. 2020, recommended by Ober et al. 2024)", choices=INDUCING_INITS)
STARTS_DOC = ("the starting kernel and noise, one or more joined by '+' (each trained, the "
              "best final objective kept): given (the job's kernel and lam; under "
              "protocol=own those hyper=ml gave), median (the median heuristic), standard "
              "(variance 1, every length scale sqrt(d/2), lam: from d alone), e.g. "
              "given+median")

SPECS: list[AlgorithmSpec] = [
    AlgorithmSpec(
        "gpytorch_sgpr", fit_sgpr,
        "GPyTorch's SGPR (Titsias; InducingPointKernel, optional L-BFGS or Adam training)",
        options={
            "max_basis": Option(256, "int", "inducing points m (started by inducing_init)",
                                lo=1, clip_to_n=True),
            "steps": Option(0, "int", "at most this many training iterations on Titsias's "
                            "bound, a safety cap (0: the start's kernel, lam and inducing "
                            "inputs, untrained)", lo=0),
            "optimizer": Option("lbfgs", "choice", "lbfgs (full-batch L-BFGS, strong-Wolfe "
                                "line search) or adam", choices=("lbfgs", "adam")),
            "lr": Option(0.1, "float", "Adam learning rate (GPyTorch's SGPR example's)", lo=0.0,
                         lo_open=True),
            "elbo_tol": Option(ELBO_TOL, "float", "converged once the bound's relative change "
                               "(one L-BFGS iteration, or 10 Adam steps, back; per row, floor 1) "
                               "is at most this (scipy L-BFGS-B's ftol, as GPflow's Scipy "
                               "optimiser and BoTorch's fit_gpytorch_mll use it; 0: off)",
                               lo=0.0),
            "grad_tol": Option(GRAD_TOL, "float", "converged once the largest component of "
                               "the gradient of GPyTorch's MLL (per row) is at most this "
                               "(scipy L-BFGS-B's gtol; 0: off)", lo=0.0),
            "diagonal_correction": Option(True, "bool", "GPyTorch's sgpr_diagonal_correction "
                                          "when predicting (its default: FITC's predictive; "
                                          "false: Titsias's DTC predictive, GPyTorch's "
                                          "variance plus k** - Q**)"),
            "inducing_init": INIT_OPTION,
            "starts": starts_option("algorithm gpytorch_sgpr", STARTS_DOC),
            "budget_seconds": BUDGET_OPTION,
        },
        has_variance=True,
        exact_limit=ExactLimit({"max_basis": "n", "steps": 0}, variance=True),
        check_options={"max_basis": 20},
        certifiable=lambda options: (options["steps"] == 0 and options["starts"] == "given"
                                     and options["inducing_init"] != "kmeans"),
        requires=(TORCH, GPYTORCH), device_blocks=True, float64_only=True,
        own_protocol={"steps": SGPR_OWN_CAP, "optimizer": "lbfgs", "elbo_tol": ELBO_TOL,
                      "grad_tol": GRAD_TOL, "inducing_init": "greedy_variance",
                      "starts": "given+median"},
    ),
    AlgorithmSpec(
        "gpytorch_svgp", fit_svgp,
        "GPyTorch's SVGP (Hensman et al.; variational inducing points, Adam on minibatches)",
        options={
            "max_basis": Option(256, "int", "inducing points m (started by inducing_init)",
                                lo=1, clip_to_n=True),
            "epochs": Option(100, "int", "at most this many passes over the shuffled training "
                             "rows, a minibatch Adam step each (0: untrained, the prior)", lo=0),
            "lr": Option(0.01, "float", "Adam learning rate (GPyTorch's SVGP example's)",
                         lo=0.0, lo_open=True),
            "batch_size": Option(1024, "int", "training rows per minibatch (GPyTorch's SVGP "
                                 "example's)", lo=1),
            "learn_kernel": Option(True, "bool", "train the kernel and the noise with q(u) and "
                                   "the inducing inputs (false: the start's kernel and lam)"),
            "holdout": Option(0.0, "float", "share of the training rows held out to stop on "
                              "(0: none, train all epochs on every row)", lo=0.0, hi=1.0,
                              hi_open=True),
            "patience": Option(PATIENCE, "int", "holdout > 0: stop after this many epochs "
                               "without a held-out improvement", lo=1),
            "heldout_tol": Option(HELDOUT_TOL, "float", "holdout > 0: an improvement is a "
                                  "drop of the held-out NLPD by more than this, relative "
                                  "(floor 1)", lo=0.0),
            "min_steps": Option(MIN_STEPS, "int", "holdout > 0: Adam steps before the held-out "
                                "rule may stop the training (GPyTorch's SVGP example trains "
                                "1360)", lo=0),
            "inducing_init": INIT_OPTION,
            "starts": starts_option("algorithm gpytorch_svgp", STARTS_DOC),
            "budget_seconds": BUDGET_OPTION,
        },
        has_variance=True, check_options={"max_basis": 10, "epochs": 2, "batch_size": 20},
        certifiable=lambda options: options["epochs"] == 0, requires=(TORCH, GPYTORCH),
        device_blocks=True, float64_only=True,
        own_protocol={"learn_kernel": True, "epochs": SVGP_OWN_CAP, "holdout": 0.1,
                      "patience": PATIENCE, "heldout_tol": HELDOUT_TOL, "min_steps": MIN_STEPS,
                      "inducing_init": "greedy_variance", "starts": "given+median"},
    ),
]
