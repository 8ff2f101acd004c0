"""Shared fixtures for the Python checks: where the repository, the model, the
engine binary and the reference tools are. Override with AGENTKV_MODEL and
AGENTKV_BIN; a missing model or binary makes the dependent tests skip, except
under CI (CI=true), where every skip is reported as a failure: there a missing
model, binary or package is a broken set-up, not a reason to pass."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true")
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ENGINE = ROOT / "build" / "agentkv"
REFERENCE_DIR = ROOT / "tools" / "reference"

# The reference implementations are plain scripts in tools/reference; make
# them importable (e.g. `import llama_ref`).
if str(REFERENCE_DIR) not in sys.path:
    sys.path.insert(0, str(REFERENCE_DIR))


@pytest.fixture(scope="session")
def repo_root():
    return ROOT


@pytest.fixture(scope="session")
def python_exe():
    return sys.executable


@pytest.fixture(scope="session")
def model_path():
    p = Path(os.environ.get("AGENTKV_MODEL", DEFAULT_MODEL))
    if not p.is_file():
        pytest.skip(f"model {p} missing (scripts/setup.sh fetches it)")
    return p


@pytest.fixture(scope="session")
def engine_path():
    p = Path(os.environ.get("AGENTKV_BIN", DEFAULT_ENGINE))
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.skip(f"engine {p} not built (cmake --preset release && cmake --build build)")
    return p


@pytest.fixture(scope="session")
def ref_model(model_path):
    """The numpy reference model (float64), loaded once per session (~10 s)."""
    import llama_ref
    return llama_ref.Model(str(model_path))


@pytest.fixture(scope="session")
def ref_tokenizer(ref_model):
    """HF `tokenizers` BPE built from the model's GGUF vocabulary (reference only)."""
    import llama_ref
    return llama_ref.make_tokenizer(ref_model.reader)


class _ServerPool:
    """Servers started by one test or module; stopped (SIGTERM) at teardown,
    where a non-zero exit code fails the test unless it was started with
    clean_exit=False."""

    def __init__(self, binary, model):
        self.binary, self.model, self.started = binary, model, []

    def __call__(self, *args, clean_exit=True, **kw):
        import server_util
        s = server_util.Server(self.binary, self.model, args, threads=server_util.env_threads(), **kw)
        self.started.append((s, clean_exit))
        return s

    def close(self):
        failures = []
        for s, clean_exit in self.started:
            rc = s.stop(timeout=60)
            if clean_exit and rc != 0:
                failures.append(f"{' '.join(s.cmd)}\n  exit code {rc} (None: killed after 60 s)\n{s.log(30)}")
        if failures:
            pytest.fail("server did not exit cleanly on SIGTERM:\n" + "\n".join(failures))


@pytest.fixture(scope="session")
def serve_binary(engine_path):
    """The engine binary, when it has the `serve` command."""
    import server_util
    if not server_util.serve_available(engine_path):
        pytest.skip(f"{engine_path} has no `serve` command (rebuild)")
    return engine_path


@pytest.fixture
def start_server(serve_binary, model_path):
    """start_server(*flags, clean_exit=True) -> server_util.Server, per test."""
    pool = _ServerPool(serve_binary, model_path)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def start_module_server(serve_binary, model_path):
    """As start_server, shared by the tests of one module."""
    pool = _ServerPool(serve_binary, model_path)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def make_adapter(serve_binary, model_path):
    """make_adapter(out_dir, seed, *extra_flags) -> out_dir, a fresh PEFT adapter
    made by `agentkv synth-adapter` (rank 8)."""
    # A binary without the command answers with the top-level help (and 0).
    r = subprocess.run([str(serve_binary), "synth-adapter", "--help"], capture_output=True, timeout=60)
    if r.returncode != 0 or not re.search(rb"Usage: \S+ synth-adapter\b", r.stdout):
        pytest.skip(f"`{serve_binary} synth-adapter --help` failed (rc={r.returncode}): the adapter "
                    "tests need `agentkv synth-adapter` to make their adapters; rebuild with it")

    def make(out, seed, *extra):
        cmd = [str(serve_binary), "synth-adapter", "--model", str(model_path), "--out", str(out),
               "--rank", "8", "--seed", str(seed), *map(str, extra)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr}"
        assert (out / "adapter_config.json").is_file(), list(out.iterdir())
        return out

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which requires every test to run: {reason}"
