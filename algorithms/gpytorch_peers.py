"""GPyTorch as a peer: Titsias's sparse GP regression (SGPR) and Hensman et al.'s stochastic
variational GP (SVGP), as GPyTorch implements them.

``gpytorch_sgpr``: an :class:`gpytorch.models.ExactGP` with zero mean, a
:class:`gpytorch.likelihoods.GaussianLikelihood` and the covariance
``InducingPointKernel(ScaleKernel(RBFKernel / MaternKernel), Z)`` (Titsias 2009), in float64
throughout (every tensor and module made float64 explicitly; torch's global default dtype and
thread count are left as the process has them). The ``max_basis`` = m inducing inputs Z start
at random training rows drawn from the job's generator, the kernel and the noise at the job's
kernel (:mod:`algorithms.peers` translates it) and λ.

- ``steps`` = 0: nothing is trained; kernel, noise and Z are the job's, so the solution is a
  kernel expansion on training rows with the job's kernel and λ and the certificate applies.
- ``steps`` > 0: training on the negative of GPyTorch's ``ExactMarginalLogLikelihood`` with
  the InducingPointKernel's added loss term, which is Titsias's collapsed bound
  log N(y | 0, Q + σ²I) − tr(K − Q)/(2σ²), Q = K_XZ K_ZZ⁻¹ K_ZX (divided by n), over the
  kernel's variance and length scale(s), the noise and Z, by ``optimizer``: ``lbfgs`` (the
  default: the bound is deterministic and full-batch, the case for a quasi-Newton method, as
  GPflow's SGPR examples optimise it with scipy's L-BFGS-B and BoTorch's ``fit_gpytorch_mll``
  fits GPyTorch models) — torch's L-BFGS with a strong-Wolfe line search, one iteration per
  step — or ``adam`` at learning rate ``lr`` (0.1, GPyTorch's SGPR example's). It stops after
  ``steps`` iterations or once the bound's relative change is below ``elbo_tol`` (1e-4): over one
  L-BFGS iteration, or over :data:`ADAM_WINDOW` Adam steps (they oscillate). An L-BFGS iteration
  that did not move (its line search found no decrease; torch's L-BFGS would repeat it forever)
  restarts L-BFGS along the gradient; a restart that cannot move ends the training. The learned
  kernel is translated back into ours; Z is no longer on training rows (``basis`` then holds
  the rows each inducing input started from) and there is no certificate. The summary has
  ``steps_run`` and the stopping reason.

The trace has a row per training step, 0 (the start) to the last one run: ``elbo`` (n ×
GPyTorch's MLL, i.e. Titsias's bound), ``noise`` and the basis size. Prediction is GPyTorch's
own, ``likelihood(model(x))`` (noise included). With ``diagonal_correction`` (GPyTorch's
default, ``gpytorch.settings.sgpr_diagonal_correction``) GPyTorch adds diag(K − Q) to the
training covariance when it predicts, so its mean is Q_*X (Q + Λ)⁻¹y with Λ = diag(K − Q) + σ²I
and its variance k** − Q_*X (Q + Λ)⁻¹ Q_X* + σ² (FITC's predictive with Titsias's
hyperparameters); without it the mean is Titsias's DTC mean Q_*X (Q + σ²I)⁻¹y and the variance
the subset-of-regressors one, Q** − Q_*X (Q + σ²I)⁻¹ Q_X* + σ² (tests/test_peers.py checks both
against dense formulas). With Z = X (m = n) and no training either is the exact GP.

The mean is held exactly as k(x, Z) @ c (our kernel, the learned one translated back), with c
from GPyTorch's own factors: GPyTorch predicts (K_*Z R)((K_XZ R)ᵀ a), where R = K_ZZ^{-1/2} is
the InducingPointKernel's inverse Cholesky root (``_inducing_inv_root``, jitter included if
GPyTorch had to add any) and a = (Q + Λ)⁻¹y is its prediction strategy's ``mean_cache``; so
c = R (K_XZ R)ᵀ a, and our mean equals GPyTorch's to round-off (≤ 1e-8 in the tests; no
predictor override is needed). The variance is GPyTorch's, computed in blocks of test rows.
Cost O(n·m²) per step and per prediction, O(n·m) memory beyond X.

``gpytorch_svgp``: GPyTorch's SVGP example in float64: an :class:`gpytorch.models.ApproximateGP`
with a whitened ``VariationalStrategy`` (learned inducing locations) and a
``CholeskyVariationalDistribution`` q(u) = N(m, S) started at the prior (``mean_init_std = 0``,
so torch's global generator is not used), trained by Adam (``lr``) on GPyTorch's
``VariationalELBO`` for ``epochs`` epochs: each a pass over a random permutation of the training
rows (drawn from the job's generator) in minibatches of ``batch_size`` rows, the last one
smaller, as a shuffled ``DataLoader`` gives them. The defaults are GPyTorch's SVGP example's
(Adam, lr 0.01, batches of 1024; its 4 epochs on 3droad are 1360 steps, so here 100 epochs: 400
steps on abalone, 3600 on kin40k). With ``learn_kernel`` (the default) q(u), the inducing inputs,
the kernel and the noise are trained together; without it only q(u) and the inducing inputs,
at the job's kernel and λ (the frontier's shared-kernel mode). GPyTorch predicts k(x, Z) L⁻ᵀ m
with L Lᵀ = K_ZZ + jitter·I (its ``variational_cholesky_jitter``, 1e-6 in float64, recorded as
``jitter``), so c = L⁻ᵀ m; its predictive variance (the same jitter added to k(x, x)) is
GPyTorch's. The trace has the minibatch ELBO (times n/batch, ``elbo_batch``) per step; the
summary ``steps_run`` and ``epochs``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from algorithms.contract import AlgorithmSpec, ExactLimit, KernelBlocks, Solution, block_rows
from algorithms.errors import InputError
from algorithms.evaluation import Recorder
from algorithms.options import Option
from algorithms.peers import (
    GPYTORCH,
    TORCH,
    check_translatable,
    gpytorch_kernel,
    import_gpytorch,
    kernel_from_gpytorch,
    library_warnings,
    torch_linalg_errors,
)

ADAM_WINDOW = 10  # Adam steps over which the bound's change is measured (module docstring)
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


def _likelihood(torch, gpytorch, lam: float):
    """GPyTorch's Gaussian likelihood in float64 with noise σ² = ``lam`` (its lower bound
    lowered below a small lam)."""
    likelihood = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(min(NOISE_FLOOR, lam / 10))
    ).double()
    likelihood.noise = torch.tensor(lam, dtype=torch.float64)
    return likelihood


def _variance_bounds(torch, model, likelihood, m: int, setting: Callable[[], Any]):
    """GPyTorch's predictive variance of y, ``likelihood(model(x)).variance``, under
    ``setting()`` (a GPyTorch settings context), in blocks of test rows."""
    batch = block_rows(max(m, 1))

    def variance_bounds(X_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X_new = np.asarray(X_new, dtype=np.float64)
        var = np.empty(len(X_new))
        with library_warnings([]), torch.no_grad(), setting():
            for lo in range(0, len(X_new), batch):
                x = torch.as_tensor(X_new[lo: lo + batch], dtype=torch.float64)
                var[lo: lo + batch] = likelihood(model(x)).variance.numpy()
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


def fit_sgpr(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
             recorder: Recorder, max_basis: int, steps: int, optimizer: str, lr: float,
             elbo_tol: float, diagonal_correction: bool) -> Solution:
    """GPyTorch's SGPR on ``max_basis`` inducing inputs at random training rows, trained by
    ``optimizer`` (L-BFGS or Adam at learning rate ``lr``) for at most ``steps`` iterations,
    stopped once the bound's relative change falls below ``elbo_tol`` (module docstring)."""
    owner = "algorithm gpytorch_sgpr"
    check_translatable(blocks.kernel, owner)
    try:
        return _fit_sgpr(blocks, y, lam, rng, recorder, max_basis, steps, optimizer, lr,
                         elbo_tol, diagonal_correction, owner)
    except torch_linalg_errors() as err:  # the evaluator's one-line error for a breakdown
        raise np.linalg.LinAlgError(" ".join(str(err).split())[:100]) from None


def _converged(bounds: list[float], optimizer: str, tol: float) -> float | None:
    """The relative change of the bound that stops training (:data:`ADAM_WINDOW` steps back
    for Adam, whose steps oscillate; one iteration back for L-BFGS), if it is below ``tol``."""
    back = ADAM_WINDOW if optimizer == "adam" else 1
    if tol <= 0 or len(bounds) <= back:
        return None
    change = abs(bounds[-1] - bounds[-1 - back]) / max(abs(bounds[-1]), 1e-300)
    return change if change < tol else None


def _fit_sgpr(blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
              recorder: Recorder, max_basis: int, steps: int, optimizer_name: str, lr: float,
              tol: float, diagonal_correction: bool, owner: str) -> Solution:
    torch, gpytorch = import_gpytorch()

    f64 = torch.float64
    n = blocks.n
    m = min(max_basis, n)
    rows = np.sort(rng.choice(n, m, replace=False))
    X = blocks.inputs(slice(None))
    tX, ty = torch.tensor(X, dtype=f64), torch.tensor(y, dtype=f64)  # copies
    caught: list[str] = []
    bounds: list[float] = []
    converged = None
    restarts, restarted, stalled = 0, False, False
    with library_warnings(caught):
        likelihood = _likelihood(torch, gpytorch, lam)
        base = gpytorch_kernel(blocks.kernel, X.shape[1], owner)
        model = sgpr_model()(tX, ty, likelihood, base, tX[rows].clone()).double()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        if optimizer_name == "adam":
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        else:  # one L-BFGS iteration (with its strong-Wolfe line search) per step
            optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=1,
                                          line_search_fn="strong_wolfe")

        def closure():
            optimizer.zero_grad()
            loss = -mll(model(tX), ty)
            loss.backward()
            return loss

        model.train()
        likelihood.train()
        for step in range(steps + 1):
            with torch.set_grad_enabled(step < steps and optimizer_name == "adam"):
                value = mll(model(tX), ty)
            bound = float(value.detach()) * n
            if not math.isfinite(bound):
                if step == 0:
                    raise FloatingPointError("GPyTorch's marginal likelihood is NaN/inf")
                raise InputError(f"{owner}: GPyTorch's marginal likelihood became NaN/inf at "
                                 f"{optimizer_name} step {step} with algorithm.lr={lr:g}; pass "
                                 "a smaller algorithm.lr or fewer algorithm.steps")
            bounds.append(bound)
            recorder.step(n_basis=m, objective=math.nan, gap=math.nan, elbo=bound,
                          noise=float(likelihood.noise.detach()))
            if optimizer_name == "lbfgs" and step and bounds[-1] == bounds[-2]:
                # the last iteration did not move: its line search found no decrease along the
                # quasi-Newton direction. Restart from steepest descent (the curvature history
                # dropped); a restart that cannot move either ends the training.
                if restarted:
                    stalled = True
                    break
                optimizer.state.clear()
                restarts += 1
                restarted = True
            else:
                restarted = False
                converged = _converged(bounds, optimizer_name, tol)
            if step == steps or converged is not None:
                break
            if optimizer_name == "adam":
                optimizer.zero_grad()
                (-value).backward()
                optimizer.step()
            else:
                optimizer.step(closure)
        model.eval()
        likelihood.eval()
        setting = gpytorch.settings.sgpr_diagonal_correction(diagonal_correction)
        with torch.no_grad(), setting:
            likelihood(model(tX[:1]))  # builds GPyTorch's prediction caches
            inducing = model.covar_module
            a = model.prediction_strategy.mean_cache  # (Q + Λ)⁻¹ y
            R = inducing._inducing_inv_root  # K_ZZ^{-1/2}, the factor GPyTorch predicts with
            K_XZ = inducing.base_kernel(tX, inducing.inducing_points).to_dense()
            coef = (R @ ((K_XZ @ R).mT @ a)).numpy()
            Z = inducing.inducing_points.detach().numpy().copy()
    noise = float(likelihood.noise.detach())
    if steps:
        kernel, lam_fit = kernel_from_gpytorch(blocks.kernel.name, base), noise
    else:
        kernel, lam_fit = blocks.kernel, lam  # untrained: the job's, GPyTorch's to round-off
    variance_bounds = _variance_bounds(
        torch, model, likelihood, m,
        lambda: gpytorch.settings.sgpr_diagonal_correction(diagonal_correction))

    reasons = {"objective": "GPyTorch optimises Titsias's bound (elbo), not L(α)",
               "gap": "GPyTorch solves no dual problem (no duality gap)"}
    run = len(bounds) - 1
    how = "L-BFGS iterations" if optimizer_name == "lbfgs" else f"Adam steps (lr={lr:g})"
    if not steps:
        stop = "no training (steps = 0): the job's kernel, lam and inducing rows"
    elif stalled:
        stop = (f"stalled: L-BFGS's line search found no decrease after {run} iterations, "
                "from its restart along the gradient too")
    elif converged is not None:
        stop = (f"converged: the bound changed by {converged:.2g} (relative) < elbo_tol={tol:g} "
                f"after {run} {how}")
    else:
        stop = f"steps = {steps} {how} reached on Titsias's bound"
    summary = {**_summary(m, stop, steps, kernel, noise, caught, reasons),
               "jitter": _jitter(caught), "elbo": bound, "steps_run": run,
               "lbfgs_restarts": restarts}
    return Solution(rows, coef, Z, kernel, lam_fit, summary, variance_bounds,
                    not_applicable=reasons)


def fit_svgp(blocks: KernelBlocks, y: np.ndarray, *, lam: float, rng: np.random.Generator,
             recorder: Recorder, max_basis: int, epochs: int, lr: float, batch_size: int,
             learn_kernel: bool) -> Solution:
    """GPyTorch's SVGP (Hensman et al. 2013) on ``max_basis`` inducing inputs at random
    training rows: Adam at learning rate ``lr`` on GPyTorch's VariationalELBO for ``epochs``
    passes over the shuffled training rows in minibatches of ``batch_size``, training q(u),
    the inducing inputs and (``learn_kernel``) the kernel and the noise (module docstring)."""
    owner = "algorithm gpytorch_svgp"
    check_translatable(blocks.kernel, owner)
    try:
        return _fit_svgp(blocks, y, lam, rng, recorder, max_basis, epochs, lr, batch_size,
                         learn_kernel, owner)
    except torch_linalg_errors() as err:
        raise np.linalg.LinAlgError(" ".join(str(err).split())[:100]) from None


def _fit_svgp(blocks: KernelBlocks, y: np.ndarray, lam: float, rng: np.random.Generator,
              recorder: Recorder, max_basis: int, epochs: int, lr: float, batch_size: int,
              learn_kernel: bool, owner: str) -> Solution:
    torch, gpytorch = import_gpytorch()
    f64 = torch.float64
    n = blocks.n
    m, batch = min(max_basis, n), min(batch_size, n)
    rows = np.sort(rng.choice(n, m, replace=False))
    X = blocks.inputs(slice(None))
    tX, ty = torch.tensor(X, dtype=f64), torch.tensor(y, dtype=f64)  # copies
    caught: list[str] = []
    step = 0
    with library_warnings(caught):
        likelihood = _likelihood(torch, gpytorch, lam)
        base = gpytorch_kernel(blocks.kernel, X.shape[1], owner)
        model = svgp_model()(base, tX[rows].clone()).double()
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)
        trained = ([*model.parameters(), *likelihood.parameters()] if learn_kernel else
                   [*model.variational_strategy.parameters()])  # q(u) and Z only
        optimizer = torch.optim.Adam(trained, lr=lr)
        model.train()
        likelihood.train()
        recorder.step(n_basis=m, objective=math.nan, gap=math.nan, elbo_batch=math.nan,
                      noise=float(likelihood.noise.detach()))
        for epoch in range(epochs):
            order = rng.permutation(n)
            for lo in range(0, n, batch):
                step += 1
                take = torch.as_tensor(order[lo: lo + batch])
                optimizer.zero_grad()
                value = elbo(model(tX[take]), ty[take])
                if not math.isfinite(float(value.detach())):
                    raise InputError(f"{owner}: GPyTorch's ELBO became NaN/inf at Adam step "
                                     f"{step} (epoch {epoch + 1}) with algorithm.lr={lr:g}; "
                                     "pass a smaller algorithm.lr or fewer algorithm.epochs")
                (-value).backward()
                optimizer.step()
                recorder.step(n_basis=m, objective=math.nan, gap=math.nan,
                              elbo_batch=float(value.detach()) * n,
                              noise=float(likelihood.noise.detach()))
        model.eval()
        likelihood.eval()
        with torch.no_grad():
            strategy = model.variational_strategy
            Z = strategy.inducing_points
            # GPyTorch predicts k(x, Z) L⁻ᵀ m with L L^T = K_ZZ + jitter·I (whitened q(u))
            K_ZZ = base(Z, Z).to_dense()
            K_ZZ = K_ZZ + strategy.jitter_val * torch.eye(m, dtype=f64)
            L = torch.linalg.cholesky(K_ZZ)
            mean_u = strategy._variational_distribution.variational_mean
            coef = torch.linalg.solve_triangular(L.mT, mean_u.unsqueeze(-1),
                                                 upper=True).squeeze(-1).numpy()
            Z = Z.detach().numpy().copy()
    noise = float(likelihood.noise.detach())
    learned = bool(epochs) and learn_kernel
    kernel = kernel_from_gpytorch(blocks.kernel.name, base) if learned else blocks.kernel
    variance_bounds = _variance_bounds(torch, model, likelihood, m, contextlib.nullcontext)

    reasons = {"objective": "GPyTorch optimises the variational ELBO, not L(α)",
               "gap": "GPyTorch solves no dual problem (no duality gap)"}
    what = "q(u), Z, kernel and noise" if learn_kernel else "q(u) and Z at the job's kernel"
    stop = (f"{epochs} epochs of Adam (lr={lr:g}, batches of {batch}: {step} steps) on the "
            f"ELBO over {what}" if epochs
            else "no training (epochs = 0): q(u) is the prior, the mean is 0")
    summary = {**_summary(m, stop, epochs, kernel, noise if learned else lam, caught, reasons),
               "jitter": float(strategy.jitter_val), "steps_run": step, "epochs": epochs}
    return Solution(rows, coef, Z, kernel, noise if learned else lam, summary, variance_bounds,
                    not_applicable=reasons)


SPECS: list[AlgorithmSpec] = [
    AlgorithmSpec(
        "gpytorch_sgpr", fit_sgpr,
        "GPyTorch's SGPR (Titsias; InducingPointKernel, optional L-BFGS or Adam training)",
        options={
            "max_basis": Option(256, "int", "inducing points m (start at random training rows)",
                                lo=1, clip_to_n=True),
            "steps": Option(0, "int", "at most this many training iterations on Titsias's "
                            "bound (0: the job's kernel, lam and inducing rows, untrained)",
                            lo=0),
            "optimizer": Option("lbfgs", "choice", "lbfgs (full-batch L-BFGS, strong-Wolfe "
                                "line search) or adam", choices=("lbfgs", "adam")),
            "lr": Option(0.1, "float", "Adam learning rate (GPyTorch's SGPR example's)", lo=0.0,
                         lo_open=True),
            "elbo_tol": Option(1e-4, "float", "stop once the bound's relative change (one L-BFGS "
                          "iteration, or 10 Adam steps, back) is below this (0: run all steps)",
                          lo=0.0),
            "diagonal_correction": Option(True, "bool", "GPyTorch's sgpr_diagonal_correction "
                                          "when predicting (its default; false: Titsias's DTC "
                                          "mean, subset-of-regressors variance)"),
        },
        has_variance=True,
        exact_limit=ExactLimit({"max_basis": "n", "steps": 0}, variance=True),
        check_options={"max_basis": 20},
        certifiable=lambda options: options["steps"] == 0, requires=(TORCH, GPYTORCH),
        own_protocol={"steps": 1000, "optimizer": "lbfgs", "elbo_tol": 1e-4},
    ),
    AlgorithmSpec(
        "gpytorch_svgp", fit_svgp,
        "GPyTorch's SVGP (Hensman et al.; variational inducing points, Adam on minibatches)",
        options={
            "max_basis": Option(256, "int", "inducing points m (start at random training rows)",
                                lo=1, clip_to_n=True),
            "epochs": Option(100, "int", "passes over the shuffled training rows, a minibatch "
                             "Adam step each (0: untrained, the prior)", lo=0),
            "lr": Option(0.01, "float", "Adam learning rate (GPyTorch's SVGP example's)",
                         lo=0.0, lo_open=True),
            "batch_size": Option(1024, "int", "training rows per minibatch (GPyTorch's SVGP "
                                 "example's)", lo=1),
            "learn_kernel": Option(True, "bool", "train the kernel and the noise with q(u) and "
                                   "the inducing inputs (false: the job's kernel and lam)"),
        },
        has_variance=True, check_options={"max_basis": 10, "epochs": 2, "batch_size": 20},
        certifiable=lambda options: options["epochs"] == 0, requires=(TORCH, GPYTORCH),
        own_protocol={"learn_kernel": True},
    ),
]
