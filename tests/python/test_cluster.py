"""scripts/cluster.sh: replicas behind nginx on loopback. An agent session
stays on one replica; killing a replica under load hangs no request (each one
completes, or gets a clean 5xx a client can retry; both counted), and the
requests after it all complete on the live replica."""
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PORT = 18380  # replicas on PORT+1, PORT+2


@pytest.fixture(scope="module")
def cluster(serve_binary, model_path, tmp_path_factory):
    if shutil.which("nginx") is None:
        pytest.skip("nginx missing (scripts/setup.sh installs Debian's nginx-light)")
    env = dict(os.environ, AGENTKV_CLUSTER_DIR=str(tmp_path_factory.mktemp("cluster")), AGENTKV_BIN=str(serve_binary))
    script = str(ROOT / "scripts" / "cluster.sh")
    r = subprocess.run([script, "start", "--replicas", "2", "--port", str(PORT), "--", "--model", str(model_path),
                        "--kv-cache-mb", "32", "--threads", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    yield env
    subprocess.run([script, "stop"], env=env, capture_output=True, timeout=60)


def post(body, session=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-Session-ID"] = session
    try:
        c.request("POST", "/v1/completions", json.dumps(body), headers)
        r = c.getresponse()
        data = r.read()
        return r.status, r.getheader("X-Agentkv-Upstream", ""), data
    finally:
        c.close()


def test_a_session_stays_on_one_replica(cluster):
    seen = {}
    for i in range(6):
        for _ in range(3):
            status, upstream, data = post({"prompt": f"agent {i} says", "max_tokens": 2}, session=f"s{i}")
            assert status == 200, data
            seen.setdefault(i, set()).add(upstream)
    assert all(len(u) == 1 for u in seen.values()), seen
    assert len(set().union(*seen.values())) == 2, seen  # both replicas serve some session


def test_killing_a_replica_under_load(cluster):
    results, lock = [], threading.Lock()

    def client(k):
        for j in range(8):
            t0 = time.monotonic()
            try:
                status, upstream, _ = post({"prompt": f"client {k} turn {j}", "max_tokens": 8}, timeout=120)
            except (OSError, http.client.HTTPException) as e:
                status, upstream = f"exception {type(e).__name__}", ""
            with lock:
                results.append((time.monotonic(), status, upstream, time.monotonic() - t0))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    while len(results) < 6:
        time.sleep(0.05)
    victim = Path(cluster["AGENTKV_CLUSTER_DIR"]) / "replica-1.pid"
    os.kill(int(victim.read_text()), 9)
    killed_at = time.monotonic()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a request hung"
    ok = sum(1 for _, s, _, _ in results if s == 200)
    clean = sum(1 for _, s, _, _ in results if s in (502, 503, 504))
    print(f"\n{len(results)} requests: {ok} completed, {clean} clean 5xx, "
          f"{len(results) - ok - clean} other (replica killed after {6} answers)")
    assert ok + clean == len(results), results
    # After the kill settles, everything completes on the live replica.
    late = [r for r in results if r[0] > killed_at + 5]
    assert all(s == 200 for _, s, _, _ in late), late
    for _ in range(4):
        status, upstream, _ = post({"prompt": "after", "max_tokens": 2})
        assert status == 200 and upstream.endswith(str(PORT + 1)), upstream
