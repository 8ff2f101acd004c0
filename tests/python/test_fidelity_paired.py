"""tools/fidelity_paired.py: paired accuracy differences against full
recomputation, pooled over files, on hand-computed cases."""
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fidelity_paired.py"


def run(tmp_path, *files):
    paths = []
    for i, rows in enumerate(files):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps({"rows": rows}))
        paths.append(str(p))
    return subprocess.run([sys.executable, str(TOOL), *paths], capture_output=True, text=True)


def test_paired_difference_and_interval(tmp_path):
    # Differences -1, 0, 0, 0: mean -0.25, sd 0.5, se 0.25, half-width 0.49.
    out = run(tmp_path, [
        {"task": "vt", "label": "full", "scores": [1, 1, 0, 1]},
        {"task": "vt", "label": "naive", "scores": [0, 1, 0, 1]},
    ])
    assert out.returncode == 0, out.stderr
    assert "vt: 4 prompts" in out.stdout
    assert "| full | 75.0% | | |" in out.stdout
    assert "| naive | 50.0% | -25.0 | [-74.0, +24.0] |" in out.stdout


def test_files_are_pooled_by_task_and_label(tmp_path):
    out = run(tmp_path,
              [{"task": "chat", "label": "full", "scores": [1, 0]}, {"task": "chat", "label": "x", "scores": [1, 0]}],
              [{"task": "chat", "label": "full", "scores": [1]}, {"task": "chat", "label": "x", "scores": [1]}])
    assert out.returncode == 0, out.stderr
    assert "chat: 3 prompts" in out.stdout
    assert "| x | 66.7% | +0.0 | [+0.0, +0.0] |" in out.stdout


def test_rows_without_scores_or_unpaired_are_errors(tmp_path):
    out = run(tmp_path, [{"task": "vt", "label": "full", "accuracy": 0.5}])
    assert out.returncode != 0 and "per-prompt scores" in out.stderr
    out = run(tmp_path, [{"task": "vt", "label": "full", "scores": [1, 0]}, {"task": "vt", "label": "x", "scores": [1]}])
    assert out.returncode != 0 and "1 prompts against full's 2" in out.stderr


def test_kl_ratio_to_a_base_scheme_is_paired(tmp_path):
    # b's KL is twice a's on every prompt: the ratio is 2 in every resample.
    # c's is a's on prompts 0-1 and 3x on 2-3: 8/4 = 2 overall, and a
    # resample that draws only the first two gives 1, only the last two 3.
    rows = [{"task": "vt", "label": "full", "scores": [1, 1, 1, 1]},
            {"task": "vt", "label": "a", "scores": [1, 1, 1, 1], "kls": [1, 1, 1, 1], "reuses": [0.5] * 4},
            {"task": "vt", "label": "b", "scores": [1, 1, 1, 1], "kls": [2, 2, 2, 2], "reuses": [0.25] * 4},
            {"task": "vt", "label": "c", "scores": [1, 1, 1, 1], "kls": [1, 1, 3, 3], "reuses": [0.5] * 4}]
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"rows": rows}))
    out = subprocess.run([sys.executable, str(TOOL), "--kl-base", "a", "--boot", "400", str(p)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "| a | 1.0000 | 50.0% | 1 |" in out.stdout
    assert "| b | 2.0000 | 25.0% | 2.00 [2.00, 2.00] |" in out.stdout
    kl_part = out.stdout.split("mean KL against a")[1]
    c = next(line for line in kl_part.splitlines() if line.startswith("| c |"))
    lo, hi = c.split("[")[1].rstrip(" |]").split(", ")
    assert 1.0 <= float(lo) < 2.0 < float(hi) <= 3.0, c
    bad = subprocess.run([sys.executable, str(TOOL), "--kl-base", "zz", str(p)], capture_output=True, text=True)
    assert bad.returncode != 0 and "no scheme labelled 'zz'" in bad.stderr


def test_two_runs_are_compared_prompt_by_prompt(tmp_path):
    """tools/fidelity_compare_runs.py: B's KL is half A's on every prompt
    (ratio 0.50 in every resample); only the first --prompts are read."""
    tool = Path(__file__).resolve().parents[2] / "tools" / "fidelity_compare_runs.py"
    a = {"rows": [{"task": "t", "label": "full", "scores": [1, 1, 1], "kls": [0, 0, 0], "reuses": [0, 0, 0]},
                  {"task": "t", "label": "x", "scores": [1, 0, 1], "kls": [2, 4, 6], "reuses": [0.5, 0.5, 0.5]}]}
    b = {"rows": [{"task": "t", "label": "full", "scores": [1, 1], "kls": [0, 0], "reuses": [0, 0]},
                  {"task": "t", "label": "x", "scores": [1, 1], "kls": [1, 2], "reuses": [0.5, 0.5]}]}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out = subprocess.run([sys.executable, str(tool), str(pa), str(pb), "--task", "t", "--names", "q8,f32",
                          "--boot", "200"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "the first 2 prompts" in out.stdout
    assert "| x | 3.0000 | 1.5000 | 0.50 [0.50, 0.50] | 50% | 100% | 50.0% | 50.0% |" in out.stdout, out.stdout
    bad = subprocess.run([sys.executable, str(tool), str(pa), str(pb), "--task", "zz"], capture_output=True, text=True)
    assert bad.returncode != 0 and "no scheme of task zz" in bad.stderr


def test_accuracy_against_another_scheme_is_paired(tmp_path):
    # relay+16 minus relay: +1, 0, 0, 0: mean +0.25, sd 0.5, half-width 0.49.
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"rows": [
        {"task": "agents", "label": "full", "scores": [1, 1, 1, 1]},
        {"task": "agents", "label": "relay", "scores": [0, 1, 0, 1]},
        {"task": "agents", "label": "relay+16", "scores": [1, 1, 0, 1]},
    ]}))
    out = subprocess.run([sys.executable, str(TOOL), "--acc-base", "relay", str(p)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "agents: accuracy against relay" in out.stdout
    assert "| relay+16 | 75.0% | +25.0 | [-24.0, +74.0] |" in out.stdout
    assert "| full | 100.0% | +50.0 |" in out.stdout
    bad = subprocess.run([sys.executable, str(TOOL), "--acc-base", "nope", str(p)], capture_output=True, text=True)
    assert bad.returncode != 0 and "no scheme labelled 'nope'" in bad.stderr
