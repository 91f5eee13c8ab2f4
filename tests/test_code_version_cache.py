"""The code versions kept under ``<store_root>/code/`` (pipeline.codeversion.cached_under):
the same versions as computed from the syntax trees, reused only while every module they cover
has the same bytes and every name they looked up is a module or not as it was; a damaged entry
is computed again, one that cannot be written is left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms.registry import REGISTRY
from pipeline import codeversion
from pipeline.codeversion import CACHE_DIR, cached_under, code_version, pipeline_version
from pipeline.job.identity import SHARED_NUMERICS

EXACT = (codeversion.module_of(REGISTRY["exact"].fit), *SHARED_NUMERICS)
DATASETS = ("pipeline.datasets.synthetic", "pipeline.datasets.spec")


def _forget() -> None:
    """A fresh process: nothing computed in memory."""
    codeversion._module_tree.cache_clear()
    codeversion.code_version.cache_clear()


@pytest.fixture(autouse=True)
def fresh():
    _forget()
    yield
    _forget()


def _versions() -> tuple[str, str, str]:
    return (code_version(*EXACT), pipeline_version(),
            code_version(*DATASETS, packages=("pipeline.datasets",)))


def _no_parsing(monkeypatch) -> None:
    def refuse(module, packages):
        raise AssertionError(f"{module} parsed although its version was kept")

    monkeypatch.setattr(codeversion, "_module_tree", refuse)


def test_kept_versions_are_the_computed_ones_and_are_reused_without_parsing(tmp_path,
                                                                            monkeypatch):
    computed = _versions()
    _forget()
    with cached_under(tmp_path):
        assert _versions() == computed  # computed, and kept
    entries = sorted((tmp_path / CACHE_DIR).glob("*.json"))
    assert len(entries) == 3
    _forget()
    with monkeypatch.context() as m:
        _no_parsing(m)
        with cached_under(tmp_path):
            assert _versions() == computed
    _forget()
    assert _versions() == computed  # outside the block: computed, nothing read
    assert sorted((tmp_path / CACHE_DIR).glob("*.json")) == entries


def _edited(monkeypatch, tmp_path: Path, module: str, text: str) -> None:
    source = codeversion._source_file(module).read_text()
    path = tmp_path / f"{module}.py"
    path.write_text(source + text)
    real = codeversion._source_file
    monkeypatch.setattr(codeversion, "_source_file",
                        lambda name: path if name == module else real(name))


@pytest.mark.parametrize("text, same", [("\n_edited = 2.0\n", False), ("\n# a comment\n", True)])
def test_an_edited_module_is_parsed_again(tmp_path, monkeypatch, text, same):
    root = tmp_path / "stores"
    with cached_under(root):
        before = code_version(*EXACT)
    _forget()
    _edited(monkeypatch, tmp_path, "algorithms.kernels", text)  # imported by exact's fit
    with cached_under(root):
        after = code_version(*EXACT)
    _forget()
    assert after == code_version(*EXACT)  # what the edited code computes without the cache
    assert (after == before) is same


def test_a_name_that_becomes_a_module_is_looked_up_again(tmp_path, monkeypatch):
    with cached_under(tmp_path):
        before = code_version(*EXACT)
    entry = next((tmp_path / CACHE_DIR).glob("*.json"))
    from pipeline.checksum import open_sealed_json

    looked_up = open_sealed_json(entry.read_bytes())["looked_up"]
    name = next(n for n, is_module in looked_up.items() if not is_module)
    new_module = tmp_path / "new_module.py"
    new_module.write_text("SCALE = 2.0\n")
    real = codeversion._source_file
    monkeypatch.setattr(codeversion, "_source_file",
                        lambda module: new_module if module == name else real(module))
    _forget()
    with cached_under(tmp_path):
        after = code_version(*EXACT)
    assert name in codeversion.closure(*EXACT) and after != before


@pytest.mark.parametrize("damage", ["garbled", "edited", "truncated", "not-json"])
def test_a_damaged_entry_is_computed_again_and_rewritten(tmp_path, damage):
    with cached_under(tmp_path):
        version = code_version(*EXACT)
    entry = next((tmp_path / CACHE_DIR).glob("*.json"))
    text = entry.read_bytes()
    entry.write_bytes({"garbled": text.replace(b'"version": "', b'"version": "0'),
                       "edited": text.replace(version.encode(), b"0" * 16),
                       "truncated": text[: len(text) // 2],
                       "not-json": b"[1, 2]"}[damage])
    _forget()
    with cached_under(tmp_path):
        assert code_version(*EXACT) == version
    assert entry.read_bytes() == text  # rewritten whole


def test_an_entry_that_cannot_be_written_is_left_out(tmp_path):
    (tmp_path / CACHE_DIR).write_text("a file where the directory goes")
    computed = code_version(*EXACT)
    _forget()
    with cached_under(tmp_path):
        assert code_version(*EXACT) == computed
    assert (tmp_path / CACHE_DIR).read_text() == "a file where the directory goes"


def test_no_cache_for_a_value_that_is_no_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for root in (None, "", "  ", 3):
        _forget()
        with cached_under(root):
            code_version(*EXACT)
    assert list(tmp_path.iterdir()) == []
