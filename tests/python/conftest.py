"""Shared fixtures for the Python checks: where the repository, the model, the
engine binary and the reference tools are. Override with AGENTKV_MODEL and
AGENTKV_BIN; a missing model or binary makes the dependent tests skip."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
