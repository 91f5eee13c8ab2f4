"""Every input of ``python -m pipeline.publish`` is untrusted (Reliability round 4): names read
from a leg's record or a table stay plain file names inside ``--out``; a run record in ``--out``
makes publish remove or overwrite only files whose sha256 it recorded and that still have it;
a foreign ``--out`` is refused; a publication is staged beside ``--out`` and a switch cut short
is completed by the next; ``--notes``/``--beside`` that are not regular files and a truncated
``.csv.gz`` are one line, exit 2 (pipeline.publish.publication_files, pipeline.publish.untrusted).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
from pathlib import Path

import pytest
import yaml

from algorithms.errors import InputError
from pipeline.checksum import seal_json
from pipeline.publish import publication_files as files
from pipeline.publish.cli import main
from pipeline.publish.job_table import job_table
from pipeline.publish.untrusted import plain_name
from tests.test_legs import _save
from tests.test_publish import _sweep, _write_run_record


@pytest.fixture(autouse=True)
def quick_figures(monkeypatch):
    """The frontier figures as small stand-ins, under their names and holding a digest of the
    table: these tests are about which files publish writes where (tests/test_publish.py
    draws the real ones), and drawing them would take seconds a publication."""
    import hashlib

    from pipeline.publish import table_frontier
    from pipeline.report.style import Figure

    def figures(table, out_dir, budgets, mode_order=(), *args):
        digest = hashlib.sha256(table.to_csv().encode()).hexdigest()
        drawn = []
        for mode in mode_order:
            for cost in ("fit", "cost"):
                for metric in ("rmse", "nlpd"):
                    path = out_dir / (f"fig{len(drawn) + 1}_frontier_final_test_{metric}_"
                                      f"{mode}_{cost}.png")
                    path.write_text(digest + path.name)
                    drawn.append(Figure(path, "A stand-in."))
        return drawn

    monkeypatch.setattr(table_frontier, "frontier_figures", figures)


def _inputs(tmp_path: Path) -> list[str]:
    """A published table and its record in ``tmp_path / "in"``; the argv that publishes them
    (``--out`` to add)."""
    (tmp_path / "in").mkdir(exist_ok=True)
    job_table(_sweep()).to_csv(tmp_path / "in" / "s.csv", index=False)
    _write_run_record(tmp_path / "in" / "s.run.yaml")
    return [str(tmp_path / "in" / "s.csv"), "--reference", "b"]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def _consistent(out: Path) -> list[str]:
    """The files of the publication in ``out``, checked against its record's sha256."""
    record = yaml.safe_load((out / "s.run.yaml").read_text())
    for name, digest in record["sha256"].items():
        assert files.sha256(out / name) == digest, name
    return record["files"]


# 1. names read from a record are plain; every write stays inside --out

@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs", ".hidden", "a/b", "a\\b",
                                  "a..b", "x" * 101, "a\x00b", "", 7])
def test_a_name_that_is_not_one_plain_component_is_refused(name):
    with pytest.raises(InputError, match="is not a plain file name"):
        plain_name(name, "the sweep")
    assert plain_name("uci_frontier-2.b", "the sweep") == "uci_frontier-2.b"


@pytest.mark.parametrize("sweep", ["../../escaped", "/tmp/escaped", ".hidden"])
def test_a_leg_whose_sweep_is_a_path_is_refused_and_nothing_is_written(tmp_path, capsys,
                                                                        sweep):
    """The seal of a leg is a sha256 anyone recomputes: a record resealed with a sweep that is
    a path is refused in one line, and nothing is written, inside ``--out`` or beside it."""
    _save(tmp_path / "legs")
    for path in (tmp_path / "legs").glob("*.leg.json"):
        doc = json.loads(path.read_text())
        doc.pop("sha256")
        path.write_bytes(seal_json({**doc, "sweep": sweep}, indent=1))
    before = _tree(tmp_path)
    assert main([str(tmp_path / "legs"), "--reference", "a", "--out",
                 str(tmp_path / "a" / "out")]) == 2
    assert f"its sweep {sweep!r} is not a plain file name" in _one_line(capsys)
    assert _tree(tmp_path) == before and not (tmp_path / "a").exists()
    assert not Path("/tmp/escaped.csv").exists()


@pytest.mark.parametrize("edit, fragment", [
    (lambda doc: {**doc, "jobs": doc["jobs"] + 1}, "holds 5 jobs, its record d-0.leg.json 6"),
    (lambda doc: {**doc, "run": {**doc["run"], "command": ["rm", "-rf"]}},
     "its run: command is \"['rm', '-rf']\", not a string"),
    (lambda doc: {**doc, "run": {**doc["run"], "budgets": ["soon"]}},
     "budgets is \"['soon']\", not a list of positive numbers"),
])
def test_a_resealed_leg_is_checked_against_what_its_table_says(tmp_path, edit, fragment):
    _save(tmp_path)
    path = tmp_path / "d-0.leg.json"
    doc = json.loads(path.read_text())
    doc.pop("sha256")
    path.write_bytes(seal_json(edit(doc), indent=1))
    from pipeline.publish import legs

    with pytest.raises(InputError, match=r"d-0") as err:
        legs.read_legs(tmp_path)
    assert fragment in str(err.value)


def test_every_file_moved_into_out_is_a_plain_child_of_it(tmp_path):
    assert files.inside(tmp_path, "s.csv") == tmp_path.resolve() / "s.csv"
    for name in ("../s.csv", "/etc/passwd", ".s.csv", "a/../../b"):
        with pytest.raises(InputError, match="is not a plain file name"):
            files.inside(tmp_path, name)


# 2. a run record in --out removes or overwrites only what publish recorded

def test_an_unsealed_run_record_in_out_makes_publish_remove_nothing(tmp_path, capsys):
    argv = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    (out / "s.run.yaml").write_text("files: [precious.txt, s.run.yaml]\n")
    before = _tree(out)
    assert main([*argv, "--out", str(out)]) == 2
    assert "s.run.yaml lists 'precious.txt', not a file publish writes" in _one_line(capsys)
    # a figure's name, with a sha256 that is not its content's: refused, nothing removed
    (out / "fig1_frontier_mine.png").write_bytes(b"my figure")
    (out / "s.run.yaml").write_text(yaml.safe_dump(
        {"files": ["fig1_frontier_mine.png", "s.run.yaml"],
         "sha256": {"fig1_frontier_mine.png": "0" * 64}}))
    before = _tree(out)
    assert main([*argv, "--out", str(out)]) == 2
    assert "fig1_frontier_mine.png is not the file publish wrote there" in _one_line(capsys)
    assert _tree(out) == before


def test_a_file_publish_wrote_and_someone_edited_is_neither_overwritten_nor_removed(
        tmp_path, capsys):
    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    out = tmp_path / "out"
    assert main(argv) == 0
    names = _consistent(out)
    assert "README.md" in names and "s_settings.csv" in names
    (out / "README.md").write_text("edited by hand")
    before = _tree(out)
    assert main(argv) == 2
    err = _one_line(capsys)
    assert f"{out.resolve() / 'README.md'} is not the file publish wrote there" in err
    assert "move it out of" in err and _tree(out) == before
    (out / "README.md").unlink()  # gone: nothing to protect; the publication goes on
    assert main(argv) == 0
    assert _consistent(out) == names


# 3. a foreign --out is refused

def test_a_non_empty_folder_that_is_no_publication_is_refused(tmp_path, capsys):
    argv = _inputs(tmp_path)
    out = tmp_path / "project"
    out.mkdir()
    (out / "README.md").write_text("my project")
    before = _tree(out)
    assert main([*argv, "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert f"--out {out} is not empty and holds no publication of s (no s.run.yaml); choose " \
           "an empty or new --out, or the folder of a previous publication of s" in err
    assert _tree(out) == before
    # a publication's folder holding a file publish writes that its record does not vouch for
    pub = tmp_path / "pub"
    assert main([*argv, "--out", str(pub)]) == 0
    record = yaml.safe_load((pub / "s.run.yaml").read_text())
    record["files"].remove("s_settings.csv")
    del record["sha256"]["s_settings.csv"]
    (pub / "s.run.yaml").write_text(yaml.safe_dump(record))
    (pub / "s_settings.csv").write_text("someone else's")
    (pub / "mine.txt").write_text("mine")
    before = _tree(pub)
    assert main([*argv, "--out", str(pub)]) == 2
    assert f"--out {pub} holds s_settings.csv, which no publication of s wrote" in \
        _one_line(capsys)
    assert _tree(pub) == before


def test_a_published_csv_re_renders_in_its_own_folder(tmp_path, capsys):
    """The CSV and the record the command names are the publication's, in place."""
    argv = _inputs(tmp_path)
    assert main([*argv, "--out", str(tmp_path / "in")]) == 0
    assert _consistent(tmp_path / "in")
    (tmp_path / "in" / "extra.md").write_text("kept")
    assert main([*argv, "--out", str(tmp_path / "in")]) == 0
    assert (tmp_path / "in" / "extra.md").read_text() == "kept"


def test_legs_kept_inside_out_are_no_foreign_file_there(tmp_path):
    """The documented layout: legs in ``docs/results/<sweep>_legs``, published into
    ``docs/results``; the legs are left as they are."""
    _save(tmp_path / "out" / "x_legs")
    legs_before = _tree(tmp_path / "out" / "x_legs")
    assert main([str(tmp_path / "out" / "x_legs"), "--reference", "a", "--out",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "x.csv").is_file()
    assert _tree(tmp_path / "out" / "x_legs") == legs_before


# 4. staged beside --out; a switch cut short is completed by the next publication

def test_a_publication_killed_while_switching_is_completed_by_the_next(tmp_path, capsys,
                                                                      monkeypatch):
    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    out = tmp_path / "out"
    assert main(argv) == 0
    first = _tree(out)
    table = job_table(_sweep())
    table["test_rmse"] *= 1.5
    table.to_csv(tmp_path / "in" / "s.csv", index=False)
    real, moved = os.replace, []

    def killed_after_three(src, dst):
        if Path(dst).parent == out.resolve():  # a move into --out (not a staged write)
            if len(moved) == 3:
                raise KeyboardInterrupt  # the process is killed mid-switch
            moved.append(Path(dst).name)
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    monkeypatch.undo()
    stage = files.stage_path(out)
    assert stage == tmp_path / ".out.publishing" and (stage / files.JOURNAL).is_file()
    mixed = _tree(out)
    assert mixed != first and mixed["s.run.yaml"] == first["s.run.yaml"]  # the record: last
    with pytest.raises(AssertionError):
        _consistent(out)  # a reader tells the mix by the record
    capsys.readouterr()
    # the next publication (any) completes the switch first, then publishes
    assert main(argv) == 0
    assert "note: completed the publication into" in capsys.readouterr().err
    assert moved == ["README.md", "fig1_frontier_final_test_rmse_shared_fit.png",
                     "fig2_frontier_final_test_nlpd_shared_fit.png"]
    assert not stage.exists() and _consistent(out) == sorted(_tree(out))


def test_a_publication_that_fails_before_its_switch_leaves_out_and_no_stage(tmp_path,
                                                                           monkeypatch):
    from pipeline.publish import folder

    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    before = _tree(tmp_path / "out")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(folder, "readme", killed)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    assert _tree(tmp_path / "out") == before
    assert not files.stage_path(tmp_path / "out").exists()


def test_a_second_publication_into_the_same_out_at_once_is_refused(tmp_path, capsys):
    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    stage = files.stage_path(tmp_path / "out")
    stage.mkdir(parents=True)
    (stage / files.OWNER).write_text(json.dumps({"host": socket.gethostname(),
                                                 "pid": os.getppid()}))  # a live process
    assert main(argv) == 2
    assert f"another publication into {tmp_path / 'out'} is at work (pid {os.getppid()}" in \
        _one_line(capsys)
    (stage / files.OWNER).write_text(json.dumps({"host": socket.gethostname(),
                                                 "pid": 2 ** 22 + 1}))  # none: killed
    assert main(argv) == 0 and not stage.exists()


# 5. --notes, --beside and the published table: regular files only, refused before opened

@pytest.mark.timeout(60)
@pytest.mark.parametrize("flag, kind", [("--notes", "a FIFO"), ("--notes", "a directory"),
                                        ("--notes", "a character device"),
                                        ("--beside", "a FIFO"), ("--beside", "a directory"),
                                        ("--beside", "a character device"),
                                        ("table", "a FIFO")])
def test_an_input_that_is_not_a_regular_file_is_refused_before_it_is_opened(
        tmp_path, capsys, flag, kind):
    """Reading a FIFO would block for ever (a device: stream without end): refused by
    ``stat`` before anything opens it, one line, nothing written."""
    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    path = {"a FIFO": tmp_path / "in" / ("s.csv" if flag == "table" else "s.fifo"),
            "a directory": tmp_path, "a character device": Path("/dev/zero")}[kind]
    if kind == "a FIFO":
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    assert main(argv if flag == "table" else [*argv, flag, str(path)]) == 2
    assert f"{path} is not a regular file (it is {kind})" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


# 6. a truncated .csv.gz is one line

def test_a_truncated_gzip_beside_file_is_one_line(tmp_path, capsys):
    from pipeline.publish.elsewhere import COLUMNS

    data = gzip.compress((",".join(COLUMNS) + "\n" + "Them,d,x,rmse,0.3,0.1,3,a,shared,64,w\n"
                          * 50).encode())
    (tmp_path / "b.csv.gz").write_bytes(data[:len(data) // 2])
    argv = [*_inputs(tmp_path), "--out", str(tmp_path / "out")]
    assert main([*argv, "--beside", str(tmp_path / "b.csv.gz")]) == 2
    assert f"--beside {tmp_path / 'b.csv.gz'}: cannot read it (it is truncated or not gzip" in \
        _one_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["cut", "not gzip"])
def test_a_truncated_gzip_data_set_is_one_line(tmp_path, content):
    from pipeline.datasets import build

    data = gzip.compress(b"1,2,3\n" * 2000)
    path = tmp_path / "data.csv.gz"
    path.write_bytes(data[:len(data) // 2] if content == "cut" else b"1,2,3\n4,5,6\n")
    with pytest.raises(InputError, match=f"dataset 'csv': {path} is truncated or not gzip"):
        build({"name": "csv", "path": str(path)})
