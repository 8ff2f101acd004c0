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
