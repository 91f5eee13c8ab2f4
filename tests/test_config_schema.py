"""One config schema: every top-level default of a job lives in conf/config.yaml, the
certificate's options are declared once and the yaml equals them, and pipeline/ reads config
keys directly (no ``.get(key, default)`` that could drift from the yaml)."""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline.config import CONF_DIR, GROUPS, complete, read_yaml
from pipeline.config.keys import CERTIFICATE_OPTIONS

ROOT = Path(__file__).resolve().parent.parent


def test_the_certificate_block_of_config_yaml_equals_its_declared_options():
    yaml_block = read_yaml(CONF_DIR / "config.yaml")["certificate"]
    assert yaml_block == {key: opt.default for key, opt in CERTIFICATE_OPTIONS.items()}


def test_every_top_level_key_has_one_row_of_the_key_table():
    """pipeline.config.keys.TOP_LEVEL has a row for each top-level key of conf/config.yaml, each
    config group that a job config holds, and ``report`` (an experiment's), and no other;
    the groups are the rows marked group; the identity's excluded keys are its roles'."""
    from pipeline.config.keys import TOP_LEVEL, keys_of_role
    from pipeline.job.identity import NOT_IDENTITY

    top = read_yaml(CONF_DIR / "config.yaml")
    in_a_job = set(GROUPS) - {"experiment", "size"}  # choices of the defaults list only
    yaml_keys = {k for k in top if k not in ("defaults", "hydra")}
    assert set(TOP_LEVEL) == yaml_keys | in_a_job | {"report"}
    assert {name for name, key in TOP_LEVEL.items() if key.group} == in_a_job
    assert set(NOT_IDENTITY) == set(TOP_LEVEL) - set(keys_of_role("identity"))
    assert set(keys_of_role("location", "execution", "applied")) == {
        "store_root", "sweep", "merge", "cluster", "scheduler", "report",
        "allow_outside_outputs", "threads", "dry_run", "relearn", "blocks", "job_timeout", "own",
        "device", "precision"}  # the identity's device part instead (pipeline.job.identity)


def test_each_checked_top_level_key_refuses_a_bad_value_in_one_line_naming_it():
    """Every key with a check passes conf/config.yaml's default and refuses a value of the
    wrong kind with an InputError that names ``key=value``."""
    import pytest

    from algorithms.errors import InputError
    from pipeline.config.keys import TOP_LEVEL, check_keys

    config = complete({"algorithm": {"name": "exact"}})
    check_keys(config)
    checked = [name for name, key in TOP_LEVEL.items() if key.check is not None]
    assert {"lam", "kappa", "seed", "threads", "blocks", "job_timeout", "merge",
            "profile_memory", "store_root", "sweep", "device", "precision",
            "relearn", "learning_curve"} == set(checked)
    for name in checked:
        with pytest.raises(InputError, match=rf"^{name}=\[\] "):
            check_keys({**config, name: []}, (name,))


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
