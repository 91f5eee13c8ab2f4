"""Pipeline: datasets, kernel blocks, Hydra app, cluster, results and reports."""
