"""``python -m pipeline.bench [key=value ...]``: :mod:`pipeline.bench.flops`."""

from pipeline.bench.flops import main

main()
