"""What every quantity an algorithm records means: a long name and units for each trace and
summary key (CF-style ``long_name`` / ``units``; ``1`` for counts, ratios and dimensionless
numbers, ``target units`` for quantities measured in the units of y: labels for axes, written
as CF attributes by :func:`pipeline.results.variables.cf_attrs`).

The contract (``tests/contract.py``) checks that every key an algorithm emits is described
here, so results written from it are self-describing; a new algorithm with a new trace key adds
one line below. Equation numbers "004 eq." are Smola & Schölkopf's.
"""

from __future__ import annotations

TARGET = "target units"
TARGET2 = "target units²"

DESCRIPTIONS: dict[str, tuple[str, str]] = {
    # the trace and summary keys every fit has (algorithms.contract)
    "n_basis": ("basis size (selected basis functions)", "1"),
    "objective": ("primal objective L(α) = ½αᵀ(K_{:M}ᵀK_{:M} + σ²K_MM)α − yᵀK_{:M}α",
                  TARGET2),
    "gap": ("relative duality gap (L − L_dual)/|L|", "1"),
    "seconds": ("fit time elapsed", "s"),
    "cpu_seconds": ("CPU time of the fit's process, every thread (time.process_time), "
                    "test evaluation excluded", "s"),
    "stop_reason": ("why the fit stopped", "1"),
    "clipped_options": ("options above n_train, clipped to it (algorithms.options.clip_to_n)",
                        "1"),
    "jitter": ("diagonal jitter added to a Cholesky factor", "1"),
    "merged_rows": ("training rows merged into an earlier row with the same input (an exact "
                    "reduction: algorithms.exact)", "1"),
    # test metrics (algorithms.contract.TASK_METRICS)
    "test_rmse": ("test root mean squared error", TARGET),
    "test_nlpd": ("test negative log predictive density (mean over points)", "nats"),
    "test_coverage_2sd": ("fraction of test targets within ±2 predictive sd", "1"),
    "test_var_below_noise": ("fraction of test rows whose predictive variance of y is below "
                             "σ² (impossible for a GP: digits lost to round-off)", "1"),
    "test_error_rate": ("test error rate (sign of the latent mean)", "1"),
    "test_log_loss": ("test log loss (mean over points)", "nats"),
    "test_brier": ("test Brier score (mean squared probability error)", "1"),
    # prediction and memory costs (algorithms.evaluation)
    "predict_mean_seconds": ("time to predict the test means", "s"),
    "predict_var_seconds": ("time to predict the test error bars", "s"),
    "predict_prob_seconds": ("time to predict the test class probabilities", "s"),
    "fit_peak_bytes": ("peak memory of the fit (tracemalloc)", "bytes"),
    "predict_mean_peak_bytes": ("peak memory of predicting the means (tracemalloc)", "bytes"),
    "predict_var_peak_bytes": ("peak memory of predicting the error bars (tracemalloc)", "bytes"),
    # duality and certificates (Theorem 1)
    "dual_objective": ("dual objective L_dual, a lower bound on min L", TARGET2),
    "objective_lower_bound": ("certified lower bound on min L (004 eq. 80)", TARGET2),
    "objective_dual_bound": ("dual bound on the objective", TARGET2),
    "gap_certified_pivots": ("relative gap certified by the pivots' lower bound", "1"),
    "n_basis_dual": ("dual basis size", "1"),
    "primal_subopt": ("primal suboptimality (L − L_min)/|L_min| against the exact solution",
                      "1"),
    "dual_subopt": ("dual suboptimality (L_max,dual − L_dual)/|L_min| against the exact "
                    "solution", "1"),
    "n_degenerate_candidates": ("candidates refused as numerically degenerate", "1"),
    "kkt_violation": ("largest violation of the KKT conditions", "1"),
    # iterative solvers
    "iteration": ("iteration number", "1"),
    "iterations": ("iterations run", "1"),
    "residual": ("relative residual ‖r‖/‖y‖ (recursively updated)", "1"),
    "residual_true": ("relative residual ‖r‖/‖y‖ recomputed at the end", "1"),
    "preconditioner": ("preconditioner", "1"),
    "precond_rank": ("rank of the pivoted-Cholesky preconditioner", "1"),
    "precond_seconds": ("time to build the preconditioner", "s"),
    "kernel_held_bytes": ("bytes of K held in memory for CG's products (0: matrix-free)",
                          "bytes"),
    "precond_trace": ("residual trace of the preconditioner tr(K − FFᵀ)/(n·σ²)", "1"),
    "iteration_seconds": ("time per iteration", "s"),
    "flops": ("floating-point operations (FLOP) of the step (BLAS work counted)", "1"),
    "project_seconds": ("time of the step computing kernel columns k(X, X_M) and "
                        "[y, K_{:S}]ᵀK_{:M} (fused)", "s"),
    "block_sm_seconds": ("time of the step in the block K_{S,M}", "s"),
    "solve_seconds": ("time of the step in the triangular solve R⁻¹G_{S,M}", "s"),
    "scores_seconds": ("time of the step scoring the candidates", "s"),
    "dual_seconds": ("time of the step in the dual greedy", "s"),
    # low-rank factorisations
    "residual_trace": ("trace of the residual K − LLᵀ", "1"),
    "residual_trace_relative": ("trace of K − LLᵀ relative to tr K", "1"),
    "n_dropped": ("pivots rejected as numerically degenerate", "1"),
    "m": ("basis size m", "1"),
    # marginal likelihood, peers and variational methods
    "log_marginal_likelihood": ("log marginal likelihood log p(y) (004 eq. 62)", "nats"),
    "learned_kernel": ("kernel after the peer's own training", "1"),
    "learned_lam": ("noise variance σ² after the peer's own training", TARGET2),
    "inducing_moved": ("the peer moved its inducing inputs", "1"),
    "steps_run": ("training iterations the peer ran (it stops at its tolerance or its steps)", "1"),
    "lbfgs_restarts": ("times L-BFGS was restarted along the gradient after an iteration that "
                       "did not move", "1"),
    "epochs": ("passes over the training rows the minibatch training made", "1"),
    "own_iterations": ("iterations (SVGP: epochs) of the kept start of the method's own "
                       "hyperparameter learning", "1"),
    "own_iterations_total": ("iterations (SVGP: epochs) of every start of the method's own "
                             "learning", "1"),
    "own_converged": ("the method's own learning stopped by its convergence rule (not its "
                      "cap)", "1"),
    "own_stop_reason": ("why the method's own learning stopped (relative_change, gradient, "
                        "stalled, no_improvement, converged: converged; cap, budget, "
                        "untrained, failed_to_converge)", "1"),
    "own_starts": ("starts of the method's own learning", "1"),
    "own_best_start": ("the start whose learning was kept (given, median, standard)", "1"),
    "own_start_summary": ("every start of the method's own learning: its score, iterations "
                          "and stop reason", "1"),
    "own_learning_seconds": ("wall time of the method's own hyperparameter learning within "
                             "its fit", "s"),
    "own_learning_cpu_seconds": ("process CPU time (all threads) of the method's own "
                                 "hyperparameter learning within its fit", "s"),
    "inducing_init": ("how the inducing inputs were initialised", "1"),
    "own_final_gradient": ("largest gradient component of the per-row objective at the last "
                           "evaluation of the kept start", "1"),
    "heldout_rows": ("training rows held out to stop the training on", "1"),
    "heldout_nlpd": ("mean negative log predictive density of the held-out training rows",
                     "nats"),
    "start": ("index of the start (0: the first of starts)", "1"),
    "library": ("peer library and version", "1"),
    "library_warnings": ("warnings the peer library raised", "1"),
    "first_warning": ("the peer library's first warning", "1"),
    "elbo": ("evidence lower bound", "nats"),
    "elbo_batch": ("minibatch evidence lower bound, times n / batch size", "nats"),
    "noise": ("noise variance σ² during training", TARGET2),
    "noise_variance": ("noise variance σ²", TARGET2),
    "noise_scale": ("noise scale (σ, or the Laplacian b)", TARGET),
    # classification and RVM (004 §3.5, §6)
    "log_posterior": ("log posterior at the mode Ψ(θ̂)", "nats"),
    "log_posterior_lower": ("lower bound on the log posterior", "nats"),
    "log_posterior_upper": ("upper bound on the log posterior", "nats"),
    "bracket_width": ("width of the log-posterior bracket", "nats"),
    "newton_iteration": ("Newton iteration", "1"),
    "newton_iterations": ("Newton iterations run", "1"),
    "newton_steps": ("Newton steps of the last inner solve", "1"),
    "newton_unconverged": ("inner Newton solves that did not converge", "1"),
    "step_halvings": ("Newton step halvings", "1"),
    "max_log_change": ("largest |Δ log s_i|, |Δ log σ²| of the last update", "1"),
    # sparse online GP (Csató & Opper)
    "removals": ("basis vectors removed so far", "1"),
    "kl_forward": ("KL(GP_t ‖ GP_t+1) between successive posteriors", "nats"),
    "kl_backward": ("KL(GP_t+1 ‖ GP_t) between successive posteriors", "nats"),
    "omission_rate": ("omission rate (removals where the score and the exact KL disagree)",
                      "1"),
    "end_omission": ("the last removal disagreed with the exact KL (1) or not (0)", "1"),
    # Zhang
    "zhang_R": ("Zhang's risk R(w^k)", TARGET2),
    "delta_R": ("R(w^k) − R(ŵ)", TARGET2),
    "bound": ("Zhang's Theorem 3.1 bound on R(w^k) − R(ŵ)", TARGET2),
    "R_hat": ("Zhang's R(ŵ) of the exact solution", TARGET2),
    "delta_R0": ("Zhang's R(0) − R(ŵ)", TARGET2),
    "zhang_R_rescaled": ("Zhang's R(w^k) of the last iterate before the SoR refit", TARGET2),
    "refit_dropped": ("basis points the SoR refit left out (numerically in the span of the "
                      "others)", "1"),
    "zhang_lambda": ("Zhang's λ = σ²/n", "1"),
    "M2": ("max_i k(x_i, x_i) (M² of Zhang's Theorem 3.1)", "1"),
    # learning curves (Ferrari-Trecate et al., Lemma 4)
    "n_train": ("training set size n", "1"),
    "xbar_error": ("generalisation error E^g(n), mean over draws of x̄", TARGET2),
    "xbar_error_se": ("standard error of E^g(n) over the draws", TARGET2),
    "xbar_error_minus_baseline": ("E^g(n) minus the baseline's, paired over the same x̄",
                                  TARGET2),
    "xbar_error_minus_baseline_se": ("standard error of the paired difference over the draws",
                                     TARGET2),
    "plateau": ("plateau σ² + Σ_{i>m} λ_i", TARGET2),
    "draws": ("draws of x̄ per n", "1"),
    "eigen_trace": ("Σ_i λ_i of the Mercer basis", "1"),
    "detaching_point": ("detaching point n̄ = σ²/λ_m", "1"),
    "lambda_m": ("m-th Mercer eigenvalue λ_m", "1"),
    "bound7_u_optimal": ("Ferrari-Trecate et al.'s bound (7) for u°", TARGET2),
    "baseline": ("the algorithm subtracted, paired over x̄", "1"),
    # the solution
    "basis": ("training-row index of each basis function, in selection order", "1"),
    "coef": ("coefficient α of each basis function", TARGET),
}


def describe(name: str) -> tuple[str, str] | None:
    """(long_name, units) of an algorithm's trace or summary key, or None if undescribed."""
    return DESCRIPTIONS.get(name)
