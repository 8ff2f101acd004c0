"""serve --fidelity-audit: sampled requests under a sharing scheme are re-run
exactly at idle priority, and /metrics shows each one's KL(exact || served)
and top-1 agreement per scheme, model and tenant. An exact scheme's audit is
0 bit for bit; an approximate scheme's is measured; requests under none are
never audited."""
import time

import pytest

from server_util import metric

INVOCATION = " Answer:"
DOC = " ".join(f"Fact {i}: the river number {i} flows north past the old mill." for i in range(12))


@pytest.fixture(scope="module")
def adapter(make_adapter, tmp_path_factory):
    return make_adapter(tmp_path_factory.mktemp("audit") / "inv", 3, "--alora-invocation", INVOCATION)


@pytest.fixture(scope="module")
def server(start_module_server, adapter):
    return start_module_server("--served-model-name", "base", "--kv-cache-mb", 64, "--max-model-len", 1024, "--fidelity-audit", 1.0,
                               "--fidelity-audit-tokens", 8, "--adapter", f"inv={adapter}:alora")


def complete(server, body):
    status, data = server.post_json("/v1/completions", {"max_tokens": 8, "temperature": 0, **body})
    assert status == 200, data
    return data


def audited(server, n, timeout=120):
    """/metrics once `n` audits have ended (audited, dropped or failed)."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        done = sum(metric(m, "agentkv_fidelity_audit_requests_total", result=r) for r in ("audited", "dropped", "failed"))
        if done >= n or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def hist(m, name, le, **labels):
    return metric(m, name + "_bucket", le=le, **labels)


def test_an_exact_scheme_audits_to_zero_bit_for_bit_and_none_is_not_audited(server):
    before = audited(server, 0)
    base = metric(before, "agentkv_fidelity_audit_requests_total", result="audited")
    complete(server, {"prompt": "Question: 2+2?", "kv_sharing": "none"})  # not sampled
    for q in ("2+2", "3+4", "5+6"):
        complete(server, {"model": "inv", "prompt": f"Question: what is {q}?{INVOCATION}", "kv_sharing": "alora"})
    m = audited(server, base + 3)
    assert metric(m, "agentkv_fidelity_audit_requests_total", result="audited") == base + 3, m
    labels = {"scheme": "alora", "model": "inv", "tenant": ""}
    assert metric(m, "agentkv_fidelity_audit_kl_count", **labels) == 3
    assert metric(m, "agentkv_fidelity_audit_kl_sum", **labels) == 0
    assert hist(m, "agentkv_fidelity_audit_kl", "1e-09", **labels) == 3
    assert hist(m, "agentkv_fidelity_audit_top1", "0.99", **labels) == 0  # all agree: every one above 0.99
    assert metric(m, "agentkv_fidelity_audit_top1_count", **labels) == 3
    assert metric(m, "agentkv_fidelity_audit_bitwise_total", scheme="alora") == 3
    assert metric(m, "agentkv_fidelity_audit_rerun_tokens_total") > 0
    # The re-runs are not user traffic: the per-model counters saw 4 requests.
    assert metric(m, "agentkv_model_requests_total", model="inv") == 3


def test_an_approximate_scheme_is_measured(server):
    base = metric(audited(server, 0), "agentkv_fidelity_audit_requests_total", result="audited")
    complete(server, {"prompt": "Notes. " + DOC, "max_tokens": 1, "kv_sharing": "none"})
    data = complete(server, {"prompt": "A different start, then: " + DOC + " Which river flows north?",
                             "kv_sharing": {"scheme": "naive"}})
    assert b'"reused_tokens"' in data
    m = audited(server, base + 1)
    labels = {"scheme": "naive", "model": "base", "tenant": ""}
    assert metric(m, "agentkv_fidelity_audit_kl_count", **labels) == 1, m
    # naive copies the document's K/V from another context: not the exact run.
    assert metric(m, "agentkv_fidelity_audit_kl_sum", **labels) > 0
    assert metric(m, "agentkv_fidelity_audit_bitwise_total", scheme="naive") == 0


def test_without_the_flag_nothing_is_audited(start_server):
    s = start_server("--kv-cache-mb", 64)
    complete(s, {"prompt": "Hello", "kv_sharing": "naive"})
    assert not any(name.startswith("agentkv_fidelity_audit") for name, _ in s.metrics())


def test_the_audit_reports_the_kl_bench_fidelity_measures(serve_binary, model_path, tmp_path):
    """scripts/audit_vs_bench.py, small (the issue's bar runs it on 200
    requests): each request the server audits gets the KL that
    bench-fidelity --teacher scheme measured offline for the same prompt,
    in the same histogram bucket, and the server served the bench's
    tokens."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "audit_vs_bench.py"), "--bin", str(serve_binary),
                        "--model", str(model_path), "--task", "retrieval", "--schemes", "naive,cacheblend",
                        "--prompts", "2", "--gen", "4", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| naive") or line.startswith("| cacheblend")]
    assert len(rows) == 2, r.stdout
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[1:4] == ["2", "2", "2"], row  # requests, same tokens, same bucket
        # naive's audit is not exact; its KL is positive on both sides.
        assert float(cells[5]) > 0 and float(cells[6]) > 0, row
