"""The scripts that compare builds: scripts/bench_builds.py (several binaries
rotated round by round) and scripts/bench_vs_llamacpp.py --no-peer (a build
against the one before it, without llama.cpp). One short round each on the
default model: the tables come out with one row per binary or test, the
ratios are paired, and a test bench-forward does not print is a clear error."""
import json
import re
import subprocess
import sys


def run(repo_root, args):
    return subprocess.run([sys.executable] + args, cwd=repo_root, capture_output=True, text=True, timeout=300)


def test_bench_builds_rotates_binaries_and_pairs_ratios(repo_root, engine_path, model_path):
    # The same binary twice: the first's own ratio is 1 by construction,
    # the second's is a real paired ratio of two runs.
    r = run(repo_root, ["scripts/bench_builds.py", str(engine_path), str(engine_path), "--rounds", "2",
                        "--test", "prefill 16", "--", "-m", str(model_path), "--prompt-lens", "16",
                        "--decode-tokens", "2"])
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith(f"| {engine_path} |")]
    assert len(rows) == 2, r.stdout
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells[2:5] == ["1.000", "1.000", "1.000"] and cells[5] == "1.000 1.000"
    second = [float(x) for x in rows[1].split("|")[-2].split()]
    assert len(second) == 2 and all(0.2 < x < 5 for x in second)


def test_bench_builds_names_a_missing_test(repo_root, engine_path, model_path):
    # 'prefill 1' is not 'prefill 16': rows match by their whole name.
    r = run(repo_root, ["scripts/bench_builds.py", str(engine_path), str(engine_path), "--rounds", "1",
                        "--test", "prefill 1", "--", "-m", str(model_path), "--prompt-lens", "16",
                        "--decode-tokens", "2"])
    assert r.returncode != 0 and "no 'prefill 1' row" in r.stderr


def test_bench_builds_refuses_bad_rounds_and_thread_lists(repo_root, engine_path):
    for args, says in ((["--rounds", "0"], "--rounds"), (["--threads", "1,2"], "one thread count")):
        r = run(repo_root, ["scripts/bench_builds.py", str(engine_path), str(engine_path)] + args)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)


def test_bench_vs_llamacpp_without_the_peer(repo_root, engine_path, model_path):
    # Q4_1 is the shipped file (model_path), so no setup_bench.sh is needed here.
    r = run(repo_root, ["scripts/bench_vs_llamacpp.py", "--no-peer", "--rounds", "2", "--types", "Q4_1",
                        "--threads", "1", "--act-quant", "before:q8,q8", "--agentkv-before", str(engine_path),
                        "--agentkv", str(engine_path), "--prompt-lens", "16", "--decode-ctx", "32",
                        "--decode-tokens", "4"])
    assert r.returncode == 0, r.stderr
    assert "llama.cpp" not in r.stdout.split("Paired by round")[0], r.stdout
    assert re.search(r"^\| Q4_1 \| prefill 16 \| 1 \| [\d.]+ \| [\d.]+ \|$", r.stdout, re.M), r.stdout
    assert re.search(r"^\| Q4_1 \| decode @32 \(4 tokens\) \| 1 \| q8 / before:q8 \|", r.stdout, re.M), r.stdout


def test_bench_vs_llamacpp_no_peer_refuses_a_plot(repo_root):
    r = run(repo_root, ["scripts/bench_vs_llamacpp.py", "--no-peer", "--plot", "/tmp/x.png"])
    assert r.returncode != 0 and "--plot" in r.stderr


def test_bench_vs_llamacpp_takes_model_files(repo_root, engine_path, model_path):
    # --models: any file, labelled by its name (the real models of issue 55).
    r = run(repo_root, ["scripts/bench_vs_llamacpp.py", "--no-peer", "--rounds", "1", "--models", str(model_path),
                        "--threads", "1", "--act-quant", "q8", "--agentkv", str(engine_path),
                        "--prompt-lens", "16", "--decode-ctx", "32", "--decode-tokens", "4"])
    assert r.returncode == 0, r.stderr
    label = model_path.name.removesuffix(".gguf")
    assert re.search(rf"^\| {re.escape(label)} \| prefill 16 \| 1 \| [\d.]+ \|$", r.stdout, re.M), r.stdout
    r = run(repo_root, ["scripts/bench_vs_llamacpp.py", "--no-peer", "--models", "/nonexistent/x.gguf"])
    assert r.returncode != 0 and "/nonexistent/x.gguf missing" in r.stderr, r.stderr


def test_bench_tool_calls_judges_and_runs(repo_root, engine_path, model_path):
    """scripts/bench_tool_calls.py: the judge's rules on made-up responses,
    then a smoke run through agentkv alone (SmolLM2 makes no calls)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("btc", repo_root / "scripts" / "bench_tool_calls.py")
    btc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(btc)
    suite = json.loads((repo_root / "tools" / "tool_suite" / "tasks.json").read_text())
    tools = suite["tools"]
    task = next(t for t in suite["tasks"] if t["id"] == "t01")

    def resp(*calls):
        return {"choices": [{"message": {"tool_calls": [
            {"function": {"name": n, "arguments": a}} for n, a in calls]}}]}
    assert btc.judge(task, tools, resp(("get_weather", '{"city": "Paris"}'))) == (True, True, True)
    assert btc.judge(task, tools, resp(("get_time", '{"timezone": "UTC"}'))) == (True, True, False)
    assert btc.judge(task, tools, resp(("get_weather", '{"town": "Paris"}'))) == (True, False, False)
    assert btc.judge(task, tools, resp(("send_email", "{}"))) == (True, False, False)
    assert btc.judge(task, tools, {"error": "HTTP 400"}) == (False, False, False)
    assert btc.sign_test(0, 0) == 1.0 and abs(btc.sign_test(10, 0) - 2 / 1024) < 1e-12
    assert len([t for t in suite["tasks"] if t["expect"]]) >= 20
    r = subprocess.run([sys.executable, str(repo_root / "scripts" / "bench_tool_calls.py"), "--engines", "agentkv",
                        "--limit", "1", "--max-tokens", "16", "--models", str(model_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| SmolLM2-135M-Instruct.Q4_1.gguf | agentkv | 0/1 |" in r.stdout, r.stdout
