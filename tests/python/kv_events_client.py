"""A subscriber to `agentkv serve --kv-events`, as a router built for vLLM
would be one: it reads all the time, fills gaps from the replay socket, and
rebuilds the replica's blocks from the events decoded by vLLM's own classes
(vllm_kv_events.py). Used by tests/python/test_kv_events.py and
scripts/soak_kv_events.py."""
import threading
import time

import msgspec
import zmq

END_SEQ = -1


class Collector:
    """Reads a SUB socket all the time: a ZeroMQ socket handles its
    connections only when its owner calls into it, so a SUB read only now and
    then would subscribe late and miss the batches sent before."""

    def __init__(self, sub, topic):
        self.sub, self.topic = sub, topic
        self.msgs = []
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            if self.sub.poll(50):
                topic, seq, payload = self.sub.recv_multipart()
                with self.lock:
                    self.msgs.append((topic, int.from_bytes(seq, "big", signed=True), payload))
                    self.last = time.monotonic()

    def take(self, quiet_s=1.0):
        """Everything received until none came for quiet_s, counted from this call
        too (the last batch may still be on its way): [(seq, payload)]."""
        t0 = time.monotonic()
        while time.monotonic() - max(self.last, t0) < quiet_s:
            time.sleep(0.05)
        with self.lock:
            got, self.msgs = self.msgs, []
        assert all(t == self.topic for t, _, _ in got), "a message under another topic"
        return [(s, p) for _, s, p in got]

    def close(self):
        self.stop = True
        self.thread.join(5)


def replay_from(address, start, topic):
    """[(seq, payload)] the replay socket returns for seq >= start."""
    d = zmq.Context.instance().socket(zmq.DEALER)
    d.connect(address)
    d.send_multipart([b"", start.to_bytes(8, "big")])
    got = []
    try:
        while True:
            assert d.poll(10000), "no replay answer in 10 s"
            empty, t, seq, payload = d.recv_multipart()
            assert empty == b""
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == END_SEQ:
                assert payload == b"" and t == b""
                return got
            assert t == topic
            got.append((seq, payload))
    finally:
        d.close(0)


def complete_sequence(msgs, replay, topic):
    """{seq: payload} from 0 to the newest, the gaps filled by replay (a
    replayed batch must equal the one received)."""
    have = dict(msgs)
    missing = [s for s in range(max(have) + 1) if s not in have]
    if missing:
        for seq, payload in replay_from(replay, min(missing), topic):
            if seq in have:
                assert have[seq] == payload, "a replayed batch differs from the one published"
            have[seq] = payload
    assert sorted(have) == list(range(max(have) + 1)), "a gap the replay did not fill"
    return have


def decode_all(have, ev):
    dec = msgspec.msgpack.Decoder(type=ev.KVEventBatch)
    return [dec.decode(have[s]) for s in sorted(have)]


def apply(view, batch, ev, block_size):
    """Applies one decoded batch to view {hash: (lora_name, parent, tokens, extra_keys)}; returns hashes removed."""
    removed = 0
    for e in batch.events:
        if isinstance(e, ev.AllBlocksCleared):
            view.clear()
        elif isinstance(e, ev.BlockStored):
            assert len(e.token_ids) == e.block_size * len(e.block_hashes) and e.block_size == block_size
            assert e.medium == "CPU" and e.lora_id is None
            assert len(e.extra_keys) == len(e.block_hashes)
            parent = e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                assert h not in view, "a hash stored twice"
                view[h] = (e.lora_name, parent, tuple(e.token_ids[i * block_size:(i + 1) * block_size]), e.extra_keys[i])
                parent = h
        else:
            assert isinstance(e, ev.BlockRemoved)
            for h in e.block_hashes:
                assert view.pop(h, None) is not None, "a hash removed that was never stored"
                removed += 1
    return removed
