"""An agentkv replica as an NVIDIA Dynamo 1.6 backend worker.

The worker registers the replica's model with Dynamo (tokens in, tokens out,
the replica's KV block size), forwards each request Dynamo's frontend routes
to it to the replica's /v1/completions as token ids (`return_token_ids`), and
hands Dynamo the replica's KV events: agentkv publishes them on ZeroMQ in
vLLM's wire format (`--kv-events`), which Dynamo's ZmqSource reads, so the
KV router knows which replica holds which prefix.

    .venv-dynamo/bin/python tools/dynamo/worker.py --agentkv http://127.0.0.1:8001 \
        --kv-events tcp://127.0.0.1:5601 --model-dir HF_DIR --served-model-name smollm2

Each `--adapter NAME` (one of the replica's `--adapter NAME=...`) is
registered as a LoRA of the base model named NAME.

The replica must run with the same `--block-size` as `--block-size` here
(16 by default in both) and `--kv-events tcp://*:PORT`. Discovery is Dynamo's
file backend by default (`DYN_FILE_KV` names its folder); pass
`--discovery-backend etcd` for several hosts.
"""
import argparse
import asyncio
import json
import os
import signal
import sys

import aiohttp
import uvloop
from dynamo.common.utils.graceful_shutdown import install_signal_handlers
from dynamo.common.utils.token_ids import normalize_request_token_ids
from dynamo.llm import KvEventPublisher, ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model
from dynamo.llm.exceptions import EngineShutdown, InvalidArgument
from dynamo.runtime import DistributedRuntime

# Dynamo's sampling_options / stop_conditions key -> agentkv's request field.
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
            "repetition_penalty": "repetition_penalty"}
STOPS = {"max_tokens": "max_tokens", "min_tokens": "min_tokens", "ignore_eos": "ignore_eos"}
# Must match Dynamo 1.6.1's tag (dynamo/vllm/handlers.py, lib/kv-router's extra_keys.rs).
DYNAMO_CACHE_SALT_PREFIX = "dynamo-cache-salt:"
# Fields agentkv cannot honour through this path: refused, never ignored.
UNSUPPORTED = {("sampling_options", "use_beam_search"), ("sampling_options", "best_of"),
               ("sampling_options", "guided_decoding"), ("output_options", "logprobs"),
               ("output_options", "prompt_logprobs")}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agentkv", required=True, help="the replica's base URL, e.g. http://127.0.0.1:8001")
    ap.add_argument("--kv-events", required=True, help="the replica's --kv-events endpoint, connectable form")
    ap.add_argument("--kv-events-topic", default="", help="the replica's --kv-events-topic")
    ap.add_argument("--model-dir", required=True, help="HF directory from tools/dynamo/hf_dir.py")
    ap.add_argument("--served-model-name", required=True, help="the name clients send as `model`")
    ap.add_argument("--block-size", type=int, default=16, help="the replica's --block-size")
    ap.add_argument("--kv-blocks", type=int, default=0,
                    help="KV blocks the replica holds, for the router's load estimate (0: read from its /metrics)")
    ap.add_argument("--context-length", type=int, default=8192)
    ap.add_argument("--namespace", default="agentkv")
    ap.add_argument("--component", default="backend")
    ap.add_argument("--discovery-backend", default="file", choices=["file", "etcd", "kubernetes", "mem"])
    ap.add_argument("--adapter", action="append", default=[], metavar="NAME",
                    help="an adapter the replica serves under NAME (its --adapter NAME=...), registered with "
                         "Dynamo as a LoRA of the base model, so the router keys its blocks by NAME as the "
                         "replica's events do (repeatable)")
    return ap.parse_args(argv)


def to_agentkv(request, model):
    """The /v1/completions body for one Dynamo PreprocessedRequest."""
    for group, key in UNSUPPORTED:
        v = (request.get(group) or {}).get(key)
        if v is not None and v is not False and not (key == "best_of" and v == 1):
            raise InvalidArgument(f"{group}.{key} is not supported by the agentkv worker")
    if ((request.get("sampling_options") or {}).get("n") or 1) != 1:
        raise InvalidArgument("sampling_options.n > 1 is not supported by the agentkv worker")
    body = {"model": model, "prompt": normalize_request_token_ids(request)["token_ids"], "stream": True,
            "return_token_ids": True, "stream_options": {"include_usage": True}}
    for src, fields in (("sampling_options", SAMPLING), ("stop_conditions", STOPS)):
        for k, dst in fields.items():
            v = (request.get(src) or {}).get(k)
            if v is not None:
                body[dst] = v
    # A client's nvext.cache_salt (the router already salted its hashes
    # with it) goes to the replica tagged as Dynamo's vLLM worker tags it:
    # the replica keeps the salt's blocks apart and its events carry the
    # tagged salt in extra_keys, from which Dynamo's decoder salts them alike.
    nvext = (request.get("extra_args") or {}).get("nvext") or request.get("nvext") or {}
    if nvext.get("cache_salt"):
        body["cache_salt"] = DYNAMO_CACHE_SALT_PREFIX + str(nvext["cache_salt"])
    stops = request.get("stop_conditions") or {}
    ids = list(stops.get("stop_token_ids") or []) + list(stops.get("stop_token_ids_hidden") or [])
    if ids:
        body["stop_token_ids"] = sorted(set(ids))
    if stops.get("stop"):
        body["stop"] = stops["stop"]
    return body


class Replica:
    """Requests to one agentkv replica over HTTP."""

    def __init__(self, args):
        self.args = args
        self.http = None
        self.lost = False

    def replica_lost(self, err):
        """The replica is gone (killed, or it closed the stream mid-answer):
        this worker leaves Dynamo (SIGTERM: it unregisters from discovery and
        drains), so the router stops sending it requests, and the request is
        refused as EngineShutdown, which the frontend migrates to another
        worker when --migration-limit allows."""
        if not self.lost:
            self.lost = True
            print(f"agentkv worker: replica {self.args.agentkv} lost ({err}); leaving", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        raise EngineShutdown(f"agentkv replica {self.args.agentkv} is unavailable")

    async def generate(self, request, context):
        if self.lost:
            raise EngineShutdown(f"agentkv replica {self.args.agentkv} is unavailable")
        try:
            async for chunk in self.forward(request, context):
                yield chunk
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
            self.replica_lost(e)

    async def forward(self, request, context):
        model = request.get("model") or self.args.served_model_name
        if model == self.args.served_model_name:
            model = None  # the replica's base model; otherwise an adapter's name
        body = to_agentkv(request, model)
        if body.get("model") is None:
            body.pop("model")
        n_prompt = len(body["prompt"])
        produced, finish, usage = 0, None, None
        async with self.http.post(self.args.agentkv + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                text = await resp.text()
                if 400 <= resp.status < 500:
                    raise InvalidArgument(f"agentkv {resp.status}: {text}")
                raise RuntimeError(f"agentkv {resp.status}: {text}")
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"agentkv: {chunk['error']}")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for ch in chunk.get("choices") or []:
                    ids = ch.get("token_ids") or []
                    produced += len(ids)
                    finish = ch.get("finish_reason") or finish
                    if ids:
                        yield {"token_ids": ids, "index": 0}
                if context.is_stopped():
                    return  # closing the response cancels the request on the replica
        u = {"prompt_tokens": n_prompt, "completion_tokens": produced, "total_tokens": n_prompt + produced}
        if usage and (usage.get("prompt_tokens_details") or {}).get("cached_tokens") is not None:
            u["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]}
        yield {"token_ids": [], "index": 0, "finish_reason": finish or "error: the replica ended the stream",
               "completion_usage": u}


async def replica_blocks(replica):
    """The replica's KV pool in blocks: the sum of agentkv_kv_blocks over its states."""
    async with replica.http.get(replica.args.agentkv + "/metrics") as resp:
        text = await resp.text()
    n = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("agentkv_kv_blocks{"))
    if n <= 0:
        sys.exit(f"agentkv worker: {replica.args.agentkv}/metrics has no agentkv_kv_blocks; pass --kv-blocks")
    return int(n)


async def main(args):
    loop = asyncio.get_running_loop()
    rt = DistributedRuntime(loop, args.discovery_backend, "tcp")
    ep = rt.endpoint(f"{args.namespace}.{args.component}.generate")
    replica = Replica(args)
    replica.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
    install_signal_handlers(loop, rt, [ep])
    # The replica's KV events, read from its PUB socket and relayed to the router.
    kv = KvEventPublisher(ep, kv_block_size=args.block_size, zmq_endpoint=args.kv_events,
                          zmq_topic=args.kv_events_topic, enable_local_indexer=True)
    rc = ModelRuntimeConfig()
    rc.total_kv_blocks = args.kv_blocks or await replica_blocks(replica)
    rc.context_length = args.context_length
    rc.enable_local_indexer = True
    common = dict(worker_type=WorkerType.Aggregated, kv_cache_block_size=args.block_size, runtime_config=rc)
    kinds = ModelType.Chat | ModelType.Completions
    await register_model(ModelInput.Tokens, kinds, ep, args.model_dir, args.served_model_name, **common)
    for name in args.adapter:
        await register_model(ModelInput.Tokens, kinds, ep, args.model_dir, lora_name=name,
                             base_model_path=args.model_dir, user_data={"lora_adapter": True}, **common)
    try:
        await ep.serve_endpoint(replica.generate)
    finally:
        kv.shutdown()
        await replica.http.close()


if __name__ == "__main__":
    uvloop.run(main(parse_args(None)))
