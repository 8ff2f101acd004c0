"""The remote KV tier (`--kv-remote redis://...`) across replicas sharing one
Redis (started here, on loopback): a prefix computed on replica A is loaded
by replica B, and B's logprobs are bitwise those of a replica that computed
everything itself; an aLoRA adapter on B loads the base's blocks A wrote;
sparsex on B finds a segment A cached at another offset of its prompt, as if
B had cached it itself; two
tenants never load each other's blocks; a corrupted value is a miss, never
wrong output; with Redis gone, B keeps serving by recompute, says so once in
its log and counts it in /metrics."""
import json
import random
import shutil
import subprocess
import time

import pytest

from server_util import free_port, metric

BLOCK = 16
INVOCATION = " Answer:"


@pytest.fixture(scope="module")
def redis():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server missing (scripts/setup.sh installs Debian's redis-server)")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True).stdout.strip() == "PONG":
            break
        time.sleep(0.05)
    yield port, proc
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def replicas(redis, start_module_server, make_adapter, tmp_path_factory):
    port, _ = redis
    inv = make_adapter(tmp_path_factory.mktemp("remote") / "inv", 3, "--alora-invocation", INVOCATION)
    common = ["--block-size", BLOCK, "--kv-cache-mb", 32, "--lr-cache-rank", 0, "--max-model-len", 2048,
              "--kv-sharing", "alora", "--adapter", f"inv={inv}:alora", "--api-key", "k1=t1", "--api-key", "k2=t2"]
    remote = ["--kv-remote", f"redis://127.0.0.1:{port}", "--kv-remote-wait-s", 10]
    a = start_module_server(*common, *remote)
    b = start_module_server(*common, *remote)
    c = start_module_server(*common)  # the reference: computes everything itself
    return a, b, c


def complete(server, prompt, key="k1", model=None):
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 1}
    if model:
        body["model"] = model
    status, data = server.post_json("/v1/completions", body, api_key=key)
    assert status == 200, data
    j = json.loads(data)
    return j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0), j["choices"][0]["logprobs"]["token_logprobs"]


def doc(seed, n=400):
    rng = random.Random(seed)
    return [rng.randrange(1000, 20000) for _ in range(n)]


def written_after(server, fn, n_blocks):
    """fn(), then waits until the replica has written n_blocks more blocks (writes are asynchronous)."""
    before = metric(server.metrics(), "agentkv_kv_remote_written_total")
    fn()
    t = time.monotonic()
    while metric(server.metrics(), "agentkv_kv_remote_written_total") < before + n_blocks:
        assert time.monotonic() - t < 30, "the replica did not write its blocks in 30 s"
        time.sleep(0.02)


def loaded(server):
    return metric(server.metrics(), "agentkv_kv_remote_blocks_loaded_total")


def test_a_prefix_computed_on_a_is_loaded_exactly_on_b(replicas):
    a, b, c = replicas
    d = doc(1)
    written_after(a, lambda: complete(a, d), len(d) // BLOCK)
    before = loaded(b)
    cached, lp_b = complete(b, d + [7, 8, 9])
    _, lp_c = complete(c, d + [7, 8, 9])
    assert cached == (len(d) // BLOCK) * BLOCK, cached  # every full block of the document
    assert loaded(b) - before == len(d) // BLOCK
    assert lp_b == lp_c  # bitwise: the loaded K/V is what B would have computed
    m = b.metrics()
    assert metric(m, "agentkv_kv_remote_loaded_bytes_total") > 0
    assert metric(a.metrics(), "agentkv_kv_remote_written_total") >= len(d) // BLOCK


def test_an_alora_adapter_on_b_loads_the_base_blocks_a_wrote(replicas):
    a, b, c = replicas
    text = "Report: " + " ".join(f"item{i} value{i * 7 % 13}" for i in range(80))
    written_after(a, lambda: complete(a, text), 8)  # the base model, on A
    before = loaded(b)
    cached, lp_b = complete(b, text + INVOCATION, model="inv")
    _, lp_c = complete(c, text + INVOCATION, model="inv")
    assert cached >= 8 * BLOCK, cached
    assert loaded(b) > before
    assert lp_b == lp_c


def create_segment(server, tokens, key="k1"):
    status, _, data = server.request("POST", "/v1/segments", {"tokens": tokens}, {"Authorization": f"Bearer {key}"})
    assert status == 200, data
    return json.loads(data)


def complete_sparsex(server, prompt, key="k1"):
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 1, "kv_sharing": {"scheme": "sparsex"}}
    status, data = server.post_json("/v1/completions", body, api_key=key)
    assert status == 200, data
    j = json.loads(data)
    reused = j["usage"].get("prompt_tokens_details", {}).get("reused_tokens", 0)
    return reused, j["choices"][0]["logprobs"]["token_logprobs"]


def test_sparsex_on_b_reuses_a_segment_a_cached_at_another_offset(replicas):
    """A segment created on A (from position 0) is found by sparsex on B inside
    another prompt, 37 tokens in: B loads its blocks through their segment
    refs, and reuses and answers bitwise as C, which created the same segment
    itself. Another tenant on B loads nothing."""
    a, b, c = replicas
    d = doc(50)  # 25 full blocks
    n = len(d) // BLOCK
    refs = "agentkv_kv_remote_segment_refs_written_total"
    before_refs = metric(a.metrics(), refs)
    written_after(a, lambda: create_segment(a, d), n)
    t = time.monotonic()
    while metric(a.metrics(), refs) < before_refs + n:
        assert time.monotonic() - t < 30, "A did not write the segment refs in 30 s"
        time.sleep(0.02)
    create_segment(c, d)
    prompt = doc(51, 37) + d + doc(52, 20)
    before = loaded(b)
    reused_b2, _ = complete_sparsex(b, prompt, key="k2")
    assert reused_b2 == 0 and loaded(b) == before  # the other tenant's namespace
    reused_b, lp_b = complete_sparsex(b, prompt)
    reused_c, lp_c = complete_sparsex(c, prompt)
    assert loaded(b) - before == n
    assert reused_b == reused_c and reused_b >= (n - 1) * BLOCK, (reused_b, reused_c)
    assert lp_b == lp_c  # bitwise: the same segment hits, with the same K/V


def test_tenants_never_load_each_others_blocks(replicas):
    a, b, _ = replicas
    d = doc(2)
    written_after(a, lambda: complete(a, d, key="k1"), len(d) // BLOCK - 1)
    before = loaded(b)
    cached, _ = complete(b, d + [1], key="k2")
    assert cached == 0 and loaded(b) == before
    cached, _ = complete(b, d + [1], key="k1")
    assert cached > 0


def test_a_corrupted_value_is_a_miss(replicas, redis):
    a, b, c = replicas
    port, _ = redis
    d = doc(3)
    written_after(a, lambda: complete(a, d), len(d) // BLOCK - 1)
    keys = subprocess.run(["redis-cli", "-p", str(port), "--scan", "--pattern", "akv:*"], capture_output=True,
                          text=True, check=True).stdout.split()
    assert keys
    for k in keys:  # one byte of each value's K/V, far past the header
        subprocess.run(["redis-cli", "-p", str(port), "SETRANGE", k, "4000", "X"], capture_output=True, check=True)
    before = metric(b.metrics(), "agentkv_kv_remote_invalid_total")
    cached, lp_b = complete(b, d + [4])
    _, lp_c = complete(c, d + [4])
    assert cached == 0
    assert metric(b.metrics(), "agentkv_kv_remote_invalid_total") > before
    assert lp_b == lp_c


def test_with_redis_gone_b_serves_by_recompute(replicas, redis):
    """Redis killed while four clients use B: no request fails, the answers
    stay exact, and B's hits fall to local-only: what B computed itself is
    still a hit, what only A computed is recomputed."""
    import threading
    a, b, c = replicas
    _, proc = redis
    from_a, own = doc(60), doc(61)
    written_after(a, lambda: complete(a, from_a), len(from_a) // BLOCK)
    statuses, lock = [], threading.Lock()

    def client(k):
        for i in range(3):
            body = {"prompt": doc(100 + 10 * k + i) + [2], "max_tokens": 4, "temperature": 0, "logprobs": 1}
            status, data = b.post_json("/v1/completions", body, api_key="k1")
            with lock:
                statuses.append((status, body["prompt"], data))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    proc.kill()
    proc.wait(10)
    for t in threads:
        t.join(300)
    assert [s for s, _, _ in statuses] == [200] * 12, [(s, d[:200]) for s, _, d in statuses if s != 200]
    for _, prompt, data in statuses[-3:]:
        _, lp_c = complete(c, prompt)
        assert json.loads(data)["choices"][0]["logprobs"]["token_logprobs"] == lp_c
    for i in range(2):  # and after it
        _, lp_b = complete(b, doc(10 + i) + [2])
        _, lp_c = complete(c, doc(10 + i) + [2])
        assert lp_b == lp_c
    before = loaded(b)
    complete(b, own)
    cached_own, _ = complete(b, own + [3])
    cached_a, _ = complete(b, from_a + [3])
    assert cached_own == (len(own) // BLOCK) * BLOCK  # local hits go on
    assert cached_a == 0 and loaded(b) == before  # A's blocks are out of reach
    m = b.metrics()
    assert metric(m, "agentkv_kv_remote_errors_total") > 0
    assert metric(m, "agentkv_kv_remote_up") == 0
    said = [line for line in b.log(400).splitlines() if "kv-remote" in line and "unavailable" in line]
    assert len(said) == 1, said
