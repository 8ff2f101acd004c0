"""`--isa` (issue 31): the q8 kernels are compiled once per instruction set
and chosen at run time. Every instruction set this machine runs gives
bitwise the same logits with `--act-quant q8`, prefill and decode, on the
default Q4_1 model and on synthetic models of every other type with a q8
path (q4_0, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K; `synth-model --type`, each with
every matrix of that type; tests/backend/matmul_q8_test.cpp covers each
kernel against the rule). Which ones run is
read from /proc/cpuinfo's flags (a skip fails CI); forcing one the CPU lacks
is a one-line error, not a crash, and is checked for each such one."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTKV = ROOT / "build" / "agentkv"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
AVX512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}
# amx-emulated: the amx kernel with its tile instructions emulated in
# software, so that the AMX kernel's layout and order are checked on any
# AVX-512 CPU (the prompt of 17 tokens fills one tile of 16 rows).
NEEDS = {"avx2": {"avx2", "fma"}, "avxvnni": {"avx2", "fma", "avx_vnni"}, "avx512": AVX512,
         "amx-emulated": AVX512, "amx": AVX512 | {"amx_tile", "amx_int8"}}


def cpu_flags():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


FLAGS = cpu_flags()
HERE = [isa for isa, need in NEEDS.items() if need <= FLAGS]  # each against scalar
LACKED = [isa for isa in NEEDS if isa not in HERE]
TOKENS = ",".join(str(t) for t in [1, 504, 3458, 282, 4649, 314, 216, 1345, 30, 2683, 28, 7, 19, 33, 101, 14, 907])

pytestmark = pytest.mark.skipif(not AGENTKV.exists() or not MODEL.exists(),
                                reason="needs build/agentkv and the default model (scripts/setup.sh)")


def run(*args, env=None):
    return subprocess.run([str(AGENTKV), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


# The synthetic models' shapes: the K types need rows of a multiple of 256,
# so that no matrix falls back to another type (synth-model's note).
SYNTH = {"q4_0": [], "q5_0": [], "q5_1": [], "q8_0": [],
         "q4_K": ["--d-model", 256, "--ffn", 512], "q5_K": ["--d-model", 256, "--ffn", 512],
         "q6_K": ["--d-model", 256, "--ffn", 512]}
WHICH = ["q4_1", *SYNTH]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("isa")
    out = {"q4_1": MODEL}
    for t, shape in SYNTH.items():
        out[t] = d / f"{t}.gguf"
        r = run("synth-model", "-o", out[t], "--preset", "tiny", *shape, "--type", t, "--seed", 3,
                "--vocab-from", MODEL)
        assert r.returncode == 0, r.stderr
        assert "note:" not in r.stdout and f" {t}" in r.stdout, r.stdout  # every matrix of type t
    return out


@pytest.fixture(scope="module")
def scalar_logits(models, tmp_path_factory):
    """The scalar kernels' logits per (model, mode), computed once."""
    d, cache = tmp_path_factory.mktemp("scalar"), {}

    def get(which, mode):
        if (which, mode) not in cache:
            extra = ["--decode-from", 5] if mode == "decode" else []
            r, cache[(which, mode)] = logits(models[which], "scalar", d / f"{which}.{mode}.f32", *extra)
            assert r.returncode == 0, r.stderr
        return cache[(which, mode)]
    return get


def logits(model, isa, out, *extra, env=None):
    r = run("logits", "-m", model, "--act-quant", "q8", "--isa", isa, "--tokens", TOKENS, "--out", out, *extra,
            env=env)
    return r, (out.read_bytes() if r.returncode == 0 else None)


@pytest.mark.parametrize("isa", HERE)
@pytest.mark.parametrize("which", WHICH)
@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_every_isa_gives_the_scalar_bits(isa, which, mode, models, scalar_logits, tmp_path):
    extra = ["--decode-from", 5] if mode == "decode" else []
    r, got = logits(models[which], isa, tmp_path / f"{isa}.f32", *extra)
    assert r.returncode == 0, r.stderr
    want = scalar_logits(which, mode)
    assert want is not None and len(got) == len(want) > 0
    assert got == want


@pytest.mark.parametrize("isa", list(NEEDS))
def test_an_isa_is_taken_where_the_cpu_has_it_and_refused_where_it_lacks_it(isa):
    r = run("logits", "--act-quant", "q8", "--isa", isa, "--tokens", "1,2")
    if isa in HERE:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode != 0 and r.returncode < 128, (r.returncode, r.stderr)
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith(f"--isa {isa}: this CPU lacks it") and "available here: scalar" in first, r.stderr


def test_auto_is_one_of_them_and_bad_choices_are_one_line_errors(tmp_path):
    _, auto = logits(MODEL, "auto", tmp_path / "auto.f32")
    _, scalar = logits(MODEL, "scalar", tmp_path / "scalar.f32")
    assert auto == scalar
    for bad, says in (("sse9", "unknown"), ("avx1024", "unknown")):
        r = run("logits", "--act-quant", "q8", "--isa", bad, "--tokens", "1,2")
        assert r.returncode != 0 and r.returncode < 128, (r.returncode, r.stderr)  # an error, not a signal
        first = r.stderr.strip().splitlines()[0]
        assert first.startswith(f"--isa {bad}: ") and says in first and "available here: scalar" in first, r.stderr


@pytest.mark.parametrize("isa", HERE)
@pytest.mark.parametrize("which", WHICH)
@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("layout", ["decode records", "file blocks"])
def test_weights_laid_out_at_load_give_the_same_bits(isa, which, mode, layout, models, scalar_logits, tmp_path):
    """--prepack-weights: prefill reads panels laid out at start instead of
    building them per call; decode of q4_K and q6_K reads their decode
    records (the default; the output matrix's too), or, with
    --no-decode-layout, the file's blocks and records laid out beside them.
    The logits keep the scalar kernels' bits, and the start log says how much
    was laid out."""
    extra = ["--decode-from", 5] if mode == "decode" else []
    if layout == "file blocks":
        extra.append("--no-decode-layout")
    r, got = logits(models[which], isa, tmp_path / f"{isa}.f32", "--prepack-weights", *extra,
                    env={**os.environ, "AGENTKV_LOG": "info"})
    assert r.returncode == 0, r.stderr
    assert "MiB of weights laid out for the q8 kernels" in r.stderr, r.stderr
    want = scalar_logits(which, mode)
    assert want is not None and len(got) == len(want) > 0
    assert got == want


@pytest.mark.parametrize("isa", HERE)
@pytest.mark.parametrize("which", ["q4_K", "q6_K", "q5_0", "q8_0", "q4_1"])
@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_the_decode_layout_is_the_default_and_gives_the_file_blocks_bits(isa, which, mode, models, scalar_logits,
                                                                         tmp_path):
    """q4_K, q6_K, q5_0 and q8_0 matrices are held in records of eight rows
    by default (logged at start), and --no-decode-layout keeps the file's
    blocks: both give the scalar kernels' bits (the scalar run reads the
    file's blocks). The default model (q4_1) has only its tied q8_0 token
    table laid out: its output product and its token rows come from the
    records."""
    extra = ["--decode-from", 5] if mode == "decode" else []
    env = {**os.environ, "AGENTKV_LOG": "info"}
    r, laid = logits(models[which], isa, tmp_path / "k8.f32", *extra, env=env)
    assert r.returncode == 0, r.stderr
    assert "decode layout: " in r.stderr and "MiB of q4_K/q6_K/q5_0/q8_0 matrices in records of eight rows" in r.stderr
    r, file = logits(models[which], isa, tmp_path / "file.f32", "--no-decode-layout", *extra, env=env)
    assert r.returncode == 0, r.stderr
    assert "decode layout: " not in r.stderr, r.stderr
    assert laid == file == scalar_logits(which, mode)


def test_prepack_weights_without_q8_says_nothing_is_laid_out():
    r = run("logits", "--act-quant", "f32", "--prepack-weights", "--tokens", "1,2")
    assert r.returncode == 0, r.stderr
    assert "--prepack-weights: nothing laid out" in r.stderr, r.stderr
