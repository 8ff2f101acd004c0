"""Tokenizer reference checks.

1. tools/reference/tokenizer_ref.py regenerates exactly the committed
   tests/data/tokenizer/expected_smollm.json (the gtest test_tokenizer
   compares the engine against that file, so it must come from the
   independent reference and nothing else).
2. `agentkv tokenize` on the real model gives the ids HF `tokenizers` gives
   (built from the same GGUF vocabulary and merges) for a sample of the corpus.
"""
import json
import subprocess
import sys

import pytest

from conftest import ROOT

CORPUS = ROOT / "tests" / "data" / "tokenizer" / "corpus.json"
EXPECTED = ROOT / "tests" / "data" / "tokenizer" / "expected_smollm.json"
SCRIPT = ROOT / "tools" / "reference" / "tokenizer_ref.py"


def test_committed_reference_is_reproducible(model_path, tmp_path):
    pytest.importorskip("jinja2", reason="the reference renders chat templates with jinja2 (pip install jinja2)")
    out = tmp_path / "expected.json"
    subprocess.run([sys.executable, str(SCRIPT), "--model", str(model_path), "--corpus", str(CORPUS),
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    fresh = json.loads(out.read_text(encoding="utf-8"))
    committed = json.loads(EXPECTED.read_text(encoding="utf-8"))
    fresh.pop("model"), committed.pop("model")
    for key in committed:
        assert fresh[key] == committed[key], f"{key} differs: rerun {SCRIPT.name} (see its header)"


def test_corpus_covers_the_required_kinds():
    strings = json.loads(CORPUS.read_text(encoding="utf-8"))["strings"]
    assert len(strings) >= 300
    joined = "".join(strings)
    for needle in ["日本語", "é", "😀", "\u0301", "עברית", "\t", "\r\n", "   ", "<|im_start|>", "def ", "3.14"]:
        assert needle in joined, needle
    assert any(s.endswith(" ") for s in strings)


@pytest.mark.parametrize("parse_special", [True, False])
def test_cli_tokenize_matches_hf(engine_path, model_path, parse_special):
    strings = json.loads(CORPUS.read_text(encoding="utf-8"))["strings"]
    cases = json.loads(EXPECTED.read_text(encoding="utf-8"))["smollm"]["cases"]
    key = "ids_special" if parse_special else "ids_plain"
    checked = 0
    for i in range(0, len(strings), 7):  # a sample: each call loads the model file
        s = strings[i]
        if not s or s.startswith("-") or "\x00" in s:
            continue
        args = [str(engine_path), "tokenize", "-m", str(model_path), "--no-bos"]
        if not parse_special:
            args.append("--no-special")
        r = subprocess.run(args + ["--", s], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = [int(x) for x in r.stdout.strip().split(",") if x]
        assert got == cases[i][key], (i, s)
        checked += 1
    assert checked >= 40
