"""The product's self-benchmarks, away from its path: ``python -m pipeline.bench`` (kernel
tiles and SGMA against GEMM, :mod:`~pipeline.bench.flops`), ``python -m
pipeline.bench.sweep_overhead`` (the sweep machinery's cost per job) and ``python -m
pipeline.bench.cluster_blocks`` (one fit spread over the workers)."""
