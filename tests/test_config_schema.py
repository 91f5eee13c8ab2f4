"""One config schema: every top-level default of a job lives in conf/config.yaml, the
certificate's options are declared once and the yaml equals them, and pipeline/ reads config
keys directly (no ``.get(key, default)`` that could drift from the yaml)."""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline.config import CONF_DIR, GROUPS, complete, read_yaml
from pipeline.job.validate import CERTIFICATE_OPTIONS

ROOT = Path(__file__).resolve().parent.parent


def test_the_certificate_block_of_config_yaml_equals_its_declared_options():
    yaml_block = read_yaml(CONF_DIR / "config.yaml")["certificate"]
    assert yaml_block == {key: opt.default for key, opt in CERTIFICATE_OPTIONS.items()}


def test_a_hand_built_config_is_completed_from_config_yaml():
    config = complete({"algorithm": {"name": "exact"}, "certificate": {"tol": 0.5}})
    top = read_yaml(CONF_DIR / "config.yaml")
    for key in ("lam", "kappa", "seed", "threads", "blocks", "profile_memory", "store_root"):
        assert config[key] == top[key]
    assert config["certificate"] == {**top["certificate"], "tol": 0.5}
    assert config["hyper"] == {"name": "fixed"}


def test_every_config_group_directory_is_a_declared_group():
    dirs = {p.name for p in CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
    assert dirs - {"reduced"} == set(GROUPS)


def _config_keys() -> set[str]:
    top = read_yaml(CONF_DIR / "config.yaml")
    return ({k for k in top if k not in ("defaults", "hydra")} | set(top["certificate"])
            | set(GROUPS))


def test_pipeline_has_no_get_with_a_default_on_a_config_key():
    keys = _config_keys() - {"name"}
    found = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if "bench" in path.parts:  # the self-benchmarks read their own config, conf/bench.yaml
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and len(node.args) == 2
                    and "attrs" not in ast.unparse(node.func.value)  # a result file's attrs
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .get({node.args[0].value!r}"
                             ", …)")
    assert not found, found
