"""tools/same_figures.py: timing keys are ignored, every other figure must match exactly."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "same_figures.py"


def run(tmp_path, a, b, *extra):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    return subprocess.run([sys.executable, str(TOOL), str(pa), str(pb), *extra], capture_output=True, text=True)


def test_timing_differs_figures_same(tmp_path):
    a = {"rows": [{"label": "relay", "mean_kl": 0.0482, "ttft_s": 0.13, "speedup": 1.4, "prefill_tok_s": 900}]}
    b = {"rows": [{"label": "relay", "mean_kl": 0.0482, "ttft_s": 0.19, "speedup": 1.1, "prefill_tok_s": 700}]}
    r = run(tmp_path, a, b)
    assert r.returncode == 0 and "same figures" in r.stdout


def test_a_figure_that_moves_is_reported(tmp_path):
    a = {"rows": [{"label": "relay", "mean_kl": 0.0482, "reuse": [1, 2]}]}
    b = {"rows": [{"label": "relay", "mean_kl": 0.0483, "reuse": [1, 2, 3]}]}
    r = run(tmp_path, a, b)
    assert r.returncode == 1
    assert "/rows[0]/mean_kl" in r.stdout and "2 items before, 3 after" in r.stdout


def test_ignore_drops_named_keys(tmp_path):
    a = {"round_robin": [{"kv_blocks": 9, "cached": 0.5}]}
    b = {"round_robin": [{"kv_blocks": 10, "cached": 0.5}]}
    assert run(tmp_path, a, b).returncode == 1
    assert run(tmp_path, a, b, "--ignore", "^kv_blocks$").returncode == 0
