"""A longest-prefix replica picker that knows the replicas only from their KV
cache events (vLLM's wire format, as `agentkv serve --kv-events` publishes
it): what a prefix-aware router (llm-d's precise-prefix scorer, Dynamo's
KV router) does, in under 100 lines, with nothing agentkv-specific.

Like those routers it keys blocks by its own hash, chained from the parent's
and computed from the event's token ids and lora_name, so it never needs the
engine's hash function. A request scores, per replica, the number of its
leading full blocks that replica holds under the request's model name; the
highest wins, and ties go to a random replica.

    picker = PrefixPicker(block_size=16)
    picker.apply("r0", payload)            # each message's third frame, per replica
    picker.pick(["r0", "r1"], token_ids, lora_name="inv", rng=random.Random(0))
"""
import collections
import hashlib

import msgspec

ROOT = b"root"


def block_key(parent, tokens, lora_name):
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(repr((tuple(tokens), lora_name)).encode())
    return h.digest()


class PrefixPicker:
    def __init__(self, block_size):
        self.block_size = block_size
        self.key_of = collections.defaultdict(dict)  # replica -> engine hash -> our key
        self.held = collections.defaultdict(collections.Counter)  # replica -> our key -> engine hashes holding it

    def apply(self, replica, payload):
        """One KVEventBatch (msgpack [ts, events, dp_rank]) from `replica`."""
        _ts, events, *_ = msgspec.msgpack.decode(payload)
        for e in events:
            kind = e["type"]
            if kind == "AllBlocksCleared":
                self.key_of[replica].clear()
                self.held[replica].clear()
            elif kind == "BlockStored":
                parent = ROOT
                if e["parent_block_hash"] is not None:
                    parent = self.key_of[replica].get(e["parent_block_hash"])
                    if parent is None:  # a chain we never saw begin: unusable for prefixes
                        continue
                bs, toks = e["block_size"], e["token_ids"]
                for i, h in enumerate(e["block_hashes"]):
                    parent = block_key(parent, toks[i * bs:(i + 1) * bs], e["lora_name"])
                    self.key_of[replica][h] = parent
                    self.held[replica][parent] += 1
            elif kind == "BlockRemoved":
                for h in e["block_hashes"]:
                    k = self.key_of[replica].pop(h, None)
                    if k is not None:
                        self.held[replica][k] -= 1
                        if self.held[replica][k] <= 0:
                            del self.held[replica][k]

    def score(self, replica, tokens, lora_name=None):
        """Leading full blocks of `tokens` the replica holds under lora_name."""
        parent, n = ROOT, 0
        for i in range(len(tokens) // self.block_size):
            parent = block_key(parent, tokens[i * self.block_size:(i + 1) * self.block_size], lora_name)
            if parent not in self.held[replica]:
                break
            n += 1
        return n

    def pick(self, replicas, tokens, lora_name=None, rng=None):
        scores = {r: self.score(r, tokens, lora_name) for r in replicas}
        best = max(scores.values())
        tied = [r for r in replicas if scores[r] == best]
        return (rng.choice(tied) if rng else tied[0]), best
