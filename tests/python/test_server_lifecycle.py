"""`agentkv serve` outside the request/response path: --config files, bad
flags, a client that hangs up mid-stream, and shutdown with idle keep-alive
connections."""
import json
import subprocess
import time

import pytest

from server_util import metric


def test_config_file_and_flag_override(start_server, tmp_path):
    cfg = tmp_path / "serve.json"
    cfg.write_text(json.dumps({"served-model-name": "from-config", "api-key": ["k1=t1", "k2=t2"],
                               "kv-cache-mb": 16}))
    server = start_server("--config", cfg, "--served-model-name", "from-flag")
    status, _, data = server.request("GET", "/v1/models", headers={"Authorization": "Bearer k2"})
    assert status == 200, data
    assert [m["id"] for m in json.loads(data)["data"]] == ["from-flag"]
    status, _, _ = server.request("GET", "/v1/models")
    assert status == 401  # the keys came from the file
    m = server.metrics()
    total = sum(metric(m, "agentkv_kv_blocks", state=s) for s in ("used", "cached", "free"))
    # 16 MiB of f16 KV for this model: 40 blocks of 16 tokens (the default 256 MiB: ~650)
    assert 0 < total < 64, total
    assert metric(m, "agentkv_prepacked_weight_bytes") == 0  # off unless asked for


def test_prepacked_weights_are_reported_and_serve(start_server):
    """--prepack-weights: the layout's bytes in the start log and /metrics,
    40 per 32 weights of SmolLM2-135M's 30 layers x 7 matrices (576x576 q and
    o, 192x576 k and v, 1536x576 gate and up, 576x1536 down: 106,168,320
    weights), and requests are served from it."""
    server = start_server("--prepack-weights")
    assert metric(server.metrics(), "agentkv_prepacked_weight_bytes") == 106_168_320 * 40 // 32
    assert "--prepack-weights: 126 MiB of weights laid out for the q8 kernels" in server.log(60)
    status, data = server.post_json("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 4,
                                                      "temperature": 0})
    assert status == 200, data
    assert json.loads(data)["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("args,needle", [
    (["--config", "/nonexistent/serve.json"], "error: cannot open config file"),
    (["--config", "CFG:{bad"], "not valid JSON"),
    (["--config", 'CFG:{"no-such-flag": 1}'], "unknown key 'no-such-flag'"),
    (["--config", 'CFG:{"max-running": "many"}'], "max-running"),
    (["--kv-cache-mb", "0"], "--kv-cache-mb"),
    (["--api-key", "no-tenant-separator"], "--api-key"),
    (["--port", "70000"], "--port"),
])
def test_bad_startup_flags_fail_cleanly(serve_binary, model_path, tmp_path, args, needle):
    if args[-1].startswith("CFG:"):  # a config file with this text
        (tmp_path / "cfg.json").write_text(args[-1][4:])
        args = [*args[:-1], tmp_path / "cfg.json"]
    cmd = [str(serve_binary), "serve", "--model", str(model_path), "--port", "0", *map(str, args)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:  # it started serving (and was killed)
        pytest.fail(f"the server started with {args}: {e.stderr!r}")
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    assert "listening" not in r.stderr


def test_missing_model_fails_cleanly(serve_binary, tmp_path):
    r = subprocess.run([str(serve_binary), "serve", "--model", str(tmp_path / "none.gguf"), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "error: " in r.stderr and "cannot open" in r.stderr, r.stderr


def test_client_hanging_up_cancels_its_request(start_server):
    server = start_server("--served-model-name", "m")
    conn = server.connection(timeout=60)
    body = {"model": "m", "prompt": "1, 2, 3, 4,", "max_tokens": 2000, "temperature": 0, "stream": True}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data:")
    # The engine publishes its counts after the step that sent the first
    # token, so /metrics may trail the stream by a moment.
    deadline = time.monotonic() + 2
    while metric(server.metrics(), "agentkv_requests_running") != 1:
        assert time.monotonic() < deadline, "the streaming request is not counted as running"
        time.sleep(0.01)
    conn.sock.shutdown(2)
    conn.close()
    # 2000 tokens would take tens of seconds; a cancelled request is gone at once.
    deadline = time.monotonic() + 5
    while metric(server.metrics(), "agentkv_requests_running") > 0:
        assert time.monotonic() < deadline, "the request kept running after its client left"
        time.sleep(0.05)
    m = server.metrics()
    assert metric(m, "agentkv_kv_blocks", state="used") == 0
    status, _, _ = server.request("GET", "/health")
    assert status == 200


def test_sigterm_with_an_idle_keepalive_connection_exits_promptly(start_server):
    server = start_server(clean_exit=False)
    conn = server.connection()
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200
    t0 = time.monotonic()
    server.terminate()
    rc = server.wait(30)
    elapsed = time.monotonic() - t0
    conn.close()
    assert rc == 0
    assert elapsed < 2, f"exit took {elapsed:.1f} s"
