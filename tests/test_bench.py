"""The benchmark experiment runs end to end at reduced size and writes its figures."""

import json
import subprocess
import sys

import numpy as np


def test_bench_writes_figures(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.bench", "n=3000", "d=5", "t_max=40", "kappa=10",
         "gemm_size=300", "gemm_repeats=2", "tail_steps=10"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip().splitlines()[-1].removeprefix("figures: ")
    figures = json.loads(open(path).read())
    assert figures["steps_run"] == 40 and figures["n"] == 3000
    assert figures["algorithm"] == "sgma"
    for key in ("gemm_flops_per_s", "flops_per_s", "step_seconds_at_t_max",
                "ratio_to_gemm", "ratio_to_gemm_at_t_max"):
        assert np.isfinite(figures[key]) and figures[key] > 0, key
    assert (tmp_path / path).parent.joinpath("sgma_flops.png").stat().st_size > 1000
