"""KV cache events of `agentkv serve --kv-events`, decoded by vLLM's own msgspec
classes (vllm_kv_events.py) as a vLLM-fed router would: every message
decodes; the view rebuilt from the events equals the prefix index the replica
reports in /metrics, through evictions; base blocks are announced under the
aLoRA adapter's name too; replay from a sequence number returns the batches
missed, byte for byte; the stream is off without the flag."""
import json
import random

import pytest

from server_util import free_port, metric

zmq = pytest.importorskip("zmq")
pytest.importorskip("msgspec")
import vllm_kv_events  # noqa: E402
from kv_events_client import Collector, apply, complete_sequence, decode_all, replay_from  # noqa: E402

BLOCK = 16
INVOCATION = " Answer:"
TOPIC = b"kv@test"


@pytest.fixture(scope="module")
def vllm_events():
    try:
        return vllm_kv_events.load()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def setup(start_module_server, make_adapter, tmp_path_factory, vllm_events):
    root = tmp_path_factory.mktemp("kvev")
    make_adapter(root / "a", 1)
    make_adapter(root / "inv", 3, "--alora-invocation", INVOCATION)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")  # the router binds; the replica connects (vLLM's rule)
    replay = f"tcp://127.0.0.1:{free_port()}"
    server = start_module_server("--block-size", BLOCK, "--kv-cache-mb", 12, "--lr-cache-rank", 0,
                                 "--max-model-len", 1024, "--kv-sharing", "alora",
                                 "--api-key", "k1=t1", "--api-key", "k2=t2",
                                 "--adapter", f"a={root / 'a'}", "--adapter", f"inv={root / 'inv'}:alora",
                                 "--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-replay", replay,
                                 "--kv-events-topic", TOPIC.decode())
    collector = Collector(sub, TOPIC)
    yield server, collector, replay, vllm_events
    collector.close()
    sub.close(0)
    ctx.term()


def complete(server, prompt, key, model=None, max_tokens=4):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if model:
        body["model"] = model
    status, data = server.post_json("/v1/completions", body, api_key=key)
    assert status == 200, data
    return json.loads(data)


def test_events_rebuild_the_prefix_index(setup):
    server, sub, replay, ev = setup
    rng = random.Random(5)
    docs = [[rng.randrange(1000, 20000) for _ in range(150)] for _ in range(10)]
    # Base, a LoRA and the aLoRA adapter on the same documents, two tenants:
    # more than the pool holds, so blocks are evicted as well as stored.
    for i, d in enumerate(docs):
        key = "k1" if i % 2 == 0 else "k2"
        complete(server, d, key)
        complete(server, d + [rng.randrange(1000, 20000) for _ in range(20)], key, model="a")
        complete(server, server_text(d) + INVOCATION, key, model="inv")
    msgs = sub.take()
    assert msgs, "no event arrived"
    # The first batches may go before the subscription reaches the PUB
    # socket: replay fills what is missing, from 0.
    have = complete_sequence(msgs, replay, TOPIC)
    batches = decode_all(have, ev)
    assert isinstance(batches[0].events[0], ev.AllBlocksCleared)
    assert all(b.data_parallel_rank == 0 for b in batches)
    view = {}
    n_removed = sum(apply(view, b, ev, BLOCK) for b in batches)
    assert n_removed > 0, "the load evicted nothing: the pool is too large for the test"
    m = server.metrics()
    indexed = metric(m, "agentkv_kv_prefix_blocks")
    base = sum(1 for v in view.values() if v[0] is None)
    # Each base block is announced twice (base, and the aLoRA adapter "inv"
    # that reads it); every other block once.
    assert len(view) == indexed + base, (len(view), indexed, base)
    assert len(view) == metric(m, "agentkv_kv_events_hashes")
    names = {v[0] for v in view.values()}
    assert {None, "a", "inv"} <= names, names
    base_tokens = {v[2] for v in view.values() if v[0] is None}
    inv_tokens = {v[2] for v in view.values() if v[0] == "inv"}
    assert base_tokens <= inv_tokens  # every base block has its alias
    # Tenants travel in extra_keys; the adapter's name leads its entries.
    stored = [e for b in batches for e in b.events if isinstance(e, ev.BlockStored)]
    keys = {k for e in stored for entry in e.extra_keys for k in (entry or ())}
    assert {"tenant:t1", "tenant:t2"} <= keys, keys
    assert all(entry[0] == e.lora_name for e in stored if e.lora_name for entry in e.extra_keys)
    assert metric(m, "agentkv_kv_events_published_total") == max(have) + 1
    assert metric(m, "agentkv_kv_events_dropped_total") == 0


def server_text(tokens):
    """A prompt string for the aLoRA adapter (its invocation is text)."""
    return "Document " + " ".join(str(t) for t in tokens[:40])


def test_replay_from_a_sequence_number(setup):
    server, sub, replay, ev = setup
    sub.take(0.3)
    complete(server, list(range(3000, 3100)), "k1")
    msgs = sub.take()
    assert msgs
    first = msgs[0][0]
    got = replay_from(replay, first, TOPIC)
    assert [s for s, _ in got][:len(msgs)] == [s for s, _ in msgs]
    assert dict(got)[first] == msgs[0][1]
    # A start past the newest batch: only the end marker.
    assert replay_from(replay, msgs[-1][0] + 1000, TOPIC) == []


def test_off_without_the_flag_and_bad_endpoints_are_errors(start_server, serve_binary, model_path):
    import subprocess
    r = subprocess.run([str(serve_binary), "serve", "--model", str(model_path), "--port", "0",
                        "--kv-events", "127.0.0.1:5557"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "tcp://HOST:PORT" in r.stderr, r.stderr
    r = subprocess.run([str(serve_binary), "serve", "--model", str(model_path), "--port", "0",
                        "--kv-events-replay", "tcp://127.0.0.1:5558"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "--kv-events-replay needs --kv-events" in r.stderr, r.stderr
    server = start_server("--block-size", BLOCK, "--kv-cache-mb", 8, "--lr-cache-rank", 0)
    complete(server, list(range(2000, 2100)), None)
    m = server.metrics()
    assert metric(m, "agentkv_kv_events_hashes") == 0
    assert metric(m, "agentkv_kv_prefix_blocks") >= 100 // BLOCK


def test_a_router_fed_the_events_finds_the_base_prefix_for_the_adapter(serve_binary, model_path):
    """scripts/bench_kv_routing.py, small: with the aliases, every aLoRA
    request goes to the replica that read its document under the base model."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "bench_kv_routing.py"), "--agentkv", str(serve_binary),
                        "--model", str(model_path), "--replicas", "2", "--docs", "6"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in r.stdout.splitlines() if line.startswith("| with")}
    assert "| 6/6 (100%)" in rows["with aliases"], r.stdout
