"""tools/fidelity_pareto.py: Pareto fronts, interpolation at matched
compute and the paired bootstrap's verdicts, on hand-computed cases."""
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fidelity_pareto.py"
sys.path.insert(0, str(TOOL.parent))
import fidelity_pareto as fp  # noqa: E402


def row(label, kls, reuses, task="vt"):
    return {"task": task, "label": label, "kls": kls, "reuses": reuses}


def run(tmp_path, rows, *args):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"rows": rows}))
    return subprocess.run([sys.executable, str(TOOL), str(p), *args], capture_output=True, text=True)


def test_front_drops_dominated_settings_and_interpolates_as_a_mix():
    fr = fp.front([(0.1, 1.0, "a"), (0.3, 0.01, "b"), (0.2, 2.0, "c"), (0.5, 0.02, "d")])
    assert [p[2] for p in fr] == ["a", "b", "full"]  # c and d lie above it; full recomputation closes it
    assert abs(fp.kl_at(fr, 0.2) - 0.505) < 1e-12  # half the requests on a, half on b
    assert abs(fp.kl_at(fr, 0.65) - 0.005) < 1e-12  # half on b, half recomputed in full
    # A setting above the chord of its neighbours is not on the hull: a mix beats it.
    assert [p[2] for p in fp.front([(0.2, 0.4, "x"), (0.4, 0.35, "y"), (0.6, 0.1, "z")])] == ["x", "z", "full"]
    assert fp.kl_at(fr, 0.05) is None  # below the cheapest setting: not extrapolated


def test_a_scheme_below_another_at_every_resample(tmp_path):
    # Identical prompts: every resample gives the same ratio, 0.5.
    out = run(tmp_path, [row("full", [0, 0, 0, 0], [0, 0, 0, 0]),
                         row("a:0.2", [0.1] * 4, [0.8] * 4), row("b:0.2", [0.2] * 4, [0.8] * 4)],
              "--at", "0.2", "--boot", "50")
    assert out.returncode == 0, out.stderr
    assert "vt: 4 prompts, 2 settings" in out.stdout
    assert "| 0.2 | a | b | 0.5 | [0.5, 0.5] | a below b |" in out.stdout, out.stdout


def test_prompts_that_disagree_are_not_separated(tmp_path):
    # a is better on two prompts and worse on two: the means tie at 0.2 each.
    out = run(tmp_path, [row("a:1", [0.1, 0.1, 0.3, 0.3], [0.5] * 4), row("b:1", [0.3, 0.3, 0.1, 0.1], [0.5] * 4)],
              "--at", "0.5", "--boot", "200")
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("| 0.5 |"))
    assert line.endswith("| not separated |"), line


def test_bad_inputs_are_errors(tmp_path):
    out = run(tmp_path, [{"task": "vt", "label": "a", "scores": [1]}])
    assert out.returncode != 0 and "no per-prompt kls/reuses" in out.stderr
    out = run(tmp_path, [row("a", [0.1, 0.2], [0.5, 0.5]), row("b", [0.1], [0.5])])
    assert out.returncode != 0 and "not paired" in out.stderr
    out = run(tmp_path, [row("a", [0.1], [0.5])], "--at", "x")
    assert out.returncode != 0 and "--at" in out.stderr
