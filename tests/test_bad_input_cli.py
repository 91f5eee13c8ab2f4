"""Bad input on the command line of one job and of a sweep: one ``error:`` line, exit 2, the
bad value named, nothing on disk changed (harness: ``tests/bad_input.py``)."""

import pytest

from tests.bad_input import Case, make_seed_dir, run_case


@pytest.fixture(scope="session")
def seed_dir(tmp_path_factory):
    return make_seed_dir(tmp_path_factory.mktemp("seed"))


CASES = [
    Case("unknown-algorithm", ("pipeline", "algorithm=nope"), ("'nope'", "sgma")),
    Case("negative-lam", ("pipeline", "lam=-1"), ("lam=-1",)),
    Case("zero-kappa", ("pipeline", "kappa=0"), ("kappa=0",)),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, seed_dir, tmp_path):
    run_case(case, seed_dir, tmp_path / "work")
