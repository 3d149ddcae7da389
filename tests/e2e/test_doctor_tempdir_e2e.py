"""`psgd doctor` where temporary files cannot be written: a failed check that says
why and what to set, never a traceback (issue 39, item 7)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import kill_tree, psgd_cmd, spawn, tmpfs

pytestmark = pytest.mark.e2e

HINT = "Read-only file system"


def _run(cmd, cwd, env, timeout=140):
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd), env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, out, err


@pytest.mark.timeout(150)
def test_a_read_only_tmpdir_is_a_failed_check_naming_it(tmp_path):
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        code, out, err = _run(psgd_cmd("doctor", "--json", "--device", "cpu"), tmp_path, {"TMPDIR": str(ro)})
    assert code == 1 and "Traceback" not in err, err
    report = json.loads(out)
    found = {f["name"]: f for f in report["findings"]}
    temp = found["temporary_directory"]
    assert temp["status"] == "failed" and HINT in temp["detail"] and f"TMPDIR={ro}" in temp["detail"]
    assert found["cpu: bsp = allreduce"]["status"] == "failed"
    assert found["cpu: round trip"]["status"] == "ok"  # what needs no file still runs
    assert report["failed"] == ["temporary_directory", "cpu: bsp = allreduce"]


@pytest.mark.timeout(150)
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_no_writable_temporary_directory_anywhere_is_a_failed_check_not_a_traceback(tmp_path):
    # /tmp and /var/tmp read-only in a private mount namespace, and the doctor started in /tmp:
    # Python's tempfile finds no usable directory at all.
    here = [Path(sys.executable).resolve(), Path(__file__).resolve()]
    if any(str(p).startswith(("/tmp/", "/var/tmp/")) for p in here):  # the mounts would hide the interpreter
        pytest.skip("the checkout or its interpreter lives under /tmp or /var/tmp, which this test mounts over")
    script = ("mount -t tmpfs -o ro,size=1m tmpfs /tmp && mount -t tmpfs -o ro,size=1m tmpfs /var/tmp "
              "|| exit 77; cd /tmp && exec " + " ".join(psgd_cmd("doctor", "--device", "cpu")))
    code, out, err = _run(["unshare", "-m", "sh", "-c", script], tmp_path, {"TMPDIR": "/tmp"})
    if code == 77 or "unshare failed" in err:
        pytest.skip(f"cannot make a private mount namespace here: {err.strip()}")
    assert code == 1 and "Traceback" not in err, err
    lines = out.strip().splitlines()
    assert f"  FAILED       temporary_directory: {HINT} (TMPDIR=/tmp): set TMPDIR to a writable directory" in lines
    assert lines[-1] == "psgd doctor: failed: temporary_directory, cpu: bsp = allreduce"
