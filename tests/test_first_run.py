"""What a new user meets in the first minutes (`aspire demo`, `aspire evaluate`): a setup problem (a package not
installed, a folder none can be made in, a full disk) is one line naming it, never a traceback."""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aspire import demo
from aspire.cli import main as aspire_main
from aspire.encoders.choice import choose_backend
from aspire.paths import DATA


def test_auto_keeps_the_exact_model_where_openvino_is_installed_without_onnx(tmp_path, monkeypatch):
    """`pip install openvino`, as the note advised, left out `onnx`, which OpenVINO's export needs: auto chose
    OpenVINO and the demo failed with "Module onnx is not installed!" in a traceback after the model loaded."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16\n")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else found(name, *a))
    choice = choose_backend(cpuinfo=cpuinfo, openvino_installed=None)
    assert choice.backend == "torch" and choice.quantize is None
    assert "onnx" in choice.note and "pip install onnx" in choice.note and "\n" not in choice.note
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # neither: both in one install
    assert "pip install openvino onnx" in choose_backend(cpuinfo=cpuinfo, openvino_installed=None).note


@pytest.mark.parametrize("backend, package, command", [
    ("openvino", "openvino", "demo"),
    ("openvino", "onnx", "demo"),
    ("onnx", "onnxruntime", "evaluate"),
])
def test_a_fast_backend_whose_package_is_missing_is_one_line(small_csfcube, tiny_model_dir, tmp_path, monkeypatch,
                                                             capsys, backend, package, command):
    """`--backend openvino` without openvino was a traceback (an ImportError is no user error); without onnx, or
    `--backend onnx` without onnxruntime, one from deep in the export or the session, after the model had loaded."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: importing it fails, find_spec says None
    common = ["--model", str(tiny_model_dir), "--data", str(small_csfcube), "--backend", backend, "-q"]
    if command == "demo":
        code = demo.main([*common, "--out", str(tmp_path / "out"), "--aspect-model", "none"])
    else:
        code = aspire_main(["evaluate", "csfcube", *common, "--scorer", "minl2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [f"error: --backend {backend} needs {package}, not installed here: pip install {package} "
                     f"(or aspire[{backend}])"], err
    assert "Traceback" not in err and not (tmp_path / "cache" / "vectors").exists()  # said before any encoding


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no folder can be made")
@pytest.mark.parametrize("cache, out, said", [
    ("/proc/x", None, "error: $ASPIRE_CACHE /proc/x: no folder can be made there (in /proc): "),
    (None, "/proc/x/demo", "error: --out /proc/x/demo: no folder can be made there (in /proc): "),
    (None, "CACHE:/proc/x/vectors", "error: --cache-dir /proc/x/vectors: no folder can be made there (in /proc): "),
])
def test_demo_refuses_a_folder_none_can_be_made_in_before_any_work(tmp_path, monkeypatch, capsys, cache, out, said):
    """`ASPIRE_CACHE=/proc/x aspire demo` passed the folder check (/proc is a folder): the default OpenVINO backend
    failed after the model loaded with "No such file or directory: /proc/x", the torch one encoded once a row (no
    cache), and `--out /proc/x/demo` failed after the first encoding."""
    monkeypatch.setenv("ASPIRE_CACHE", cache or str(tmp_path / "cache"))
    argv = ["--data", str(tmp_path), "--aspect-model", "none", "--out", str(tmp_path / "out")]
    if out and out.startswith("CACHE:"):
        argv += ["--cache-dir", out.removeprefix("CACHE:")]
    elif out:
        argv[-1] = out
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err


def test_demo_reads_an_existing_cache_it_may_not_write(tmp_path, monkeypatch):
    """A shared read-only cache (`--cache-dir`, `$ASPIRE_CACHE`) that exists was refused before any work, though it may
    hold every vector the demo needs and `aspire evaluate` reads it (a write it refuses is a warning there)."""
    import tempfile

    cache = tmp_path / "cache"
    (cache / "vectors").mkdir(parents=True)
    make = tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):  # the cache cannot be written (root writes a 0o555 folder)
        if dir is not None and Path(dir).is_relative_to(cache):
            raise PermissionError(errno.EACCES, "Permission denied")
        return make(*args, dir=dir, **kwargs)

    class Reached(Exception):
        pass

    def past_the_folder_checks(name):
        raise Reached(name)

    monkeypatch.setattr("aspire.cliutil.tempfile.mkdtemp", read_only)
    monkeypatch.setattr("aspire.demo.check_model", past_the_folder_checks)
    monkeypatch.setenv("ASPIRE_CACHE", str(cache))
    with pytest.raises(Reached):
        demo.main(["--data", str(tmp_path), "--aspect-model", "none", "--out", str(tmp_path / "out"),
                   "--cache-dir", str(cache / "vectors")])


def test_the_folder_check_leaves_nothing_behind(tmp_path):
    from aspire.cliutil import check_folders

    (tmp_path / "kept").mkdir()
    check_folders(out=str(tmp_path / "kept"), cache_dir=str(tmp_path / "new" / "vectors"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]  # the probe made and removed its folder


def test_a_full_disk_while_writing_a_file_names_the_file(tmp_path, capsys):
    """The demo's results on a full disk ended in "error: [Errno 28] No space left on device", naming nothing: a
    write's own error carries no file name."""
    from aspire.cliutil import run_command
    from aspire.io import atomic_write

    target = tmp_path / "out" / "perq.csv"

    def write() -> int:
        with atomic_write(target) as handle:
            handle.write("query,MAP\n")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what the handle's write raises on a full disk

    assert run_command(write) == 2
    assert capsys.readouterr().err == f"error: No space left on device: {target}\n"
    assert list(target.parent.iterdir()) == []  # its temporary file removed


def test_a_real_full_disk_names_the_file(tmp_path):
    """The same on a real full disk (a 64 KiB tmpfs in a private mount namespace, where the machine allows one)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = 'mount -t tmpfs -o size=64k tmpfs "$1" && shift && exec "$@"'
    script = ("import sys; from aspire.cliutil import run_command; from aspire.io import write_text; "
              "sys.exit(run_command(lambda: write_text(sys.argv[1], 'x' * 200_000) or 0))")
    for flags in (["-r", "-m"], ["-m"]):  # an unprivileged user namespace, else root
        if shutil.which("unshare") is None:
            break
        done = subprocess.run(["unshare", *flags, "sh", "-c", mount, "sh", str(disk), sys.executable, "-c", script,
                               str(disk / "results.json")], capture_output=True, text=True, timeout=60)
        if "mount" not in done.stderr and "unshare" not in done.stderr:
            assert (done.returncode, done.stderr) == (2, f"error: No space left on device: {disk / 'results.json'}\n")
            return
    pytest.skip("no private tmpfs mount on this machine (unshare)")


@pytest.mark.parametrize("out", ["/proc/aspire-nope/out", "FILE/out"])
def test_evaluate_refuses_an_out_no_folder_can_be_made_in_before_any_work(small_csfcube, tmp_path, capsys, out):
    """`aspire evaluate csfcube --out /proc/y` scored the run and then failed writing it ("No such file or directory:
    /proc/y"); a new --out is checked as the other commands check theirs, before the work."""
    (tmp_path / "FILE").write_text("x")
    out = out.replace("FILE", str(tmp_path / "FILE"))
    ranked = small_csfcube.parent / "ranked"  # a ranked folder the benchmark reads: the published one, cut to its pools
    shutil.copytree(Path(DATA) / "csfcube" / "sample_ranked_pools", ranked)
    try:
        status = aspire_main(["evaluate", "csfcube", "--data", str(small_csfcube), "--ranked", str(ranked), "--exp",
                              "specter", "--out", out])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert f"--out {out}" in err and ("no folder can be made there" in err or "is a file, not a folder" in err)


def test_index_merge_reads_a_shards_folder_it_may_not_write(tmp_path, capsys, monkeypatch):
    """`index merge --shards DIR` only reads DIR: a read-only or another user's shards folder was refused as one "no
    folder can be made" in, before anything was read. Its --out is still checked."""
    import tempfile

    from aspire.index.__main__ import main as index_main

    shards = tmp_path / "shards"
    shards.mkdir()
    make = tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):  # the shards folder cannot be written (root writes a 0o555 one)
        if dir is not None and Path(dir) == shards:
            raise PermissionError(errno.EACCES, "Permission denied")
        return make(*args, dir=dir, **kwargs)

    monkeypatch.setattr("aspire.cliutil.tempfile.mkdtemp", read_only)
    try:
        status = index_main(["merge", "--shards", str(shards), "--out", str(tmp_path / "index")])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and "no folder can be made" not in err and "shard" in err, err  # read: it holds no shards
    try:
        status = index_main(["merge", "--shards", str(shards), "--out", "/proc/aspire-nope/index"])
    except SystemExit as exc:
        status = exc.code
    assert status == 2 and "--out /proc/aspire-nope/index: no folder can be made there" in capsys.readouterr().err
