"""tools/lragent/dose_response.py: the paired loss against none and its
interval, from the JSON files eval_pipeline.py and divergence.py write."""
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "lragent"))

import dose_response  # noqa: E402


def test_the_paired_difference_and_its_interval():
    # 10 questions: the scheme loses 3 that none had and gains 1.
    none = [1, 1, 1, 1, 0, 0, 1, 1, 0, 1]
    sch = [0, 0, 0, 1, 1, 0, 1, 1, 0, 1]
    m, h = dose_response.paired(none, sch)
    d = [-1, -1, -1, 0, 1, 0, 0, 0, 0, 0]
    mean = sum(d) / 10
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 9)
    assert math.isclose(m, -20.0) and math.isclose(h, 100 * 1.96 * sd / math.sqrt(10))
    assert dose_response.paired([1, 0], [1, 0]) == (0.0, 0.0)


def test_the_table_reads_both_files(tmp_path):
    def run(label, correct):
        return {"label": label, "accuracy": 100.0 * sum(correct) / len(correct),
                "results": [{"index": i, "correct": bool(c)} for i, c in enumerate(correct)]}
    ev = {"runs": [run("none", [1, 1, 0, 1]), run("full", [0, 1, 0, 1]), {"label": "droidspeak", "error": "x"}]}
    div = {"sets": {"s": {"mean": {}, "mean_over_pairs": {"Vb_cos": 0.9, "V_cos": 0.88, "K_cos": 0.98}}}}
    kl = {"schemes": {"full": {"all": {"kl": 0.1234}}}}
    (tmp_path / "k.json").write_text(json.dumps(kl))
    (tmp_path / "e.json").write_text(json.dumps(ev))
    (tmp_path / "d.json").write_text(json.dumps(div))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "lragent" / "dose_response.py"), "--set",
                          f"lr1={tmp_path / 'e.json'},{tmp_path / 'd.json'},{tmp_path / 'k.json'}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    row = [l for l in out.stdout.splitlines() if l.startswith("| lr1 |")][0]
    assert "| 75.0% (4 q) | 0.900 | 0.880 | 0.980 |" in row
    assert "50.0% (-25.0 [" in row and "; KL 0.123)" in row and row.count("not run") == 3
