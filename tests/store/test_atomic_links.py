"""write_atomic follows symbolic links and writes streams in place (as
root, --output /dev/stdout replaced the machine's /dev/stdout link by a regular file)."""
import os
import subprocess
import sys

import pytest

from perfgate.errors import StoreError
from perfgate.store.atomic import is_stream, unwritable_reason, write_atomic


def test_a_link_to_a_file_stays_a_link_and_its_target_is_replaced(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert write_atomic(link, "new") == link
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new"


def test_a_dangling_link_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "sub" / "made.json")
    write_atomic(link, b"x")
    assert link.is_symlink() and (tmp_path / "sub" / "made.json").read_bytes() == b"x"


def test_streams_are_written_in_place(tmp_path):
    assert is_stream("/dev/stdout") and is_stream("/proc/self/fd/1") and is_stream("/dev/fd/5")
    assert not is_stream(tmp_path / "x.json")
    r, w = os.pipe()
    try:
        write_atomic(f"/dev/fd/{w}", "through the pipe")
        os.close(w)
        w = None
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    assert unwritable_reason("/dev/stdout") is None


def test_dev_stdout_redirected_to_a_file_gets_the_json_and_stays_a_link(tmp_path):
    before = os.path.islink("/dev/stdout")
    out = tmp_path / "fp.json"
    cap = tmp_path / "cap"
    subprocess.run([sys.executable, "-m", "perfgate", "synth", str(cap)], check=True, capture_output=True)
    with open(out, "wb") as f:
        r = subprocess.run([sys.executable, "-m", "perfgate", "fingerprint", str(cap), "--output", "/dev/stdout"],
                           stdout=f, stderr=subprocess.PIPE, text=False)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"{") and b'"metrics"' in out.read_bytes()
    assert os.path.islink("/dev/stdout") == before


def test_a_closed_pipe_on_a_stream_output_keeps_the_exit_code(tmp_path):
    cap = tmp_path / "cap"
    subprocess.run([sys.executable, "-m", "perfgate", "synth", str(cap)], check=True, capture_output=True)
    p = subprocess.Popen([sys.executable, "-m", "perfgate", "fingerprint", str(cap), "--output", "/dev/stdout"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()             # the reader goes away, as `| head -c 10`
    _, err = p.communicate()
    assert p.returncode == 0, err


def test_fingerprint_output_dash_is_stdout(tmp_path):
    cap = tmp_path / "cap"
    subprocess.run([sys.executable, "-m", "perfgate", "synth", str(cap)], check=True, capture_output=True)
    r = subprocess.run([sys.executable, "-m", "perfgate", "fingerprint", str(cap), "-o", "-"], cwd=tmp_path,
                       capture_output=True)
    assert r.returncode == 0 and r.stdout.startswith(b"{")
    assert not (tmp_path / "-").exists()


def test_an_unwritable_special_file_is_refused_before_work(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anything")
    fifo = tmp_path / "f"
    os.mkfifo(fifo, 0o444)
    assert "not writable" in unwritable_reason(fifo)
