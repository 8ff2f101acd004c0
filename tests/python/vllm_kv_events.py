"""vLLM's own KV cache event classes, loaded without vLLM installed.

scripts/setup_vllm_events.sh keeps vllm/distributed/kv_events.py from the
vllm 0.33.0 wheel in ~/.cache/agentkv/vllm-0.33.0. The module is executed as
it is; only its imports from the rest of vLLM (a config dataclass, a logger,
network helpers, and the ExternalBlockHash alias, `bytes | int` in
vllm/v1/core/kv_cache_utils.py) are given small stand-ins. Its msgspec
classes, which are what decode the wire format, are vLLM's."""
import logging
import os
import sys
import types
from pathlib import Path

VLLM_VERSION = "0.33.0"


def events_file():
    root = Path(os.environ.get("AGENTKV_VLLM_EVENTS_DIR",
                               Path.home() / ".cache" / "agentkv" / f"vllm-{VLLM_VERSION}"))
    return root / "vllm" / "distributed" / "kv_events.py"


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def load():
    """The module vllm.distributed.kv_events, or raises FileNotFoundError."""
    if "vllm.distributed.kv_events" in sys.modules:
        return sys.modules["vllm.distributed.kv_events"]
    path = events_file()
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing (scripts/setup_vllm_events.sh fetches it)")

    class KVEventsConfig:  # vllm/config/kv_events.py: a plain config record
        def __init__(self, **kw):
            self.__dict__.update(kw)

    for pkg in ("vllm", "vllm.config", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.distributed"):
        _stub(pkg, __path__=[])
    _stub("vllm.config.kv_events", KVEventsConfig=KVEventsConfig)
    _stub("vllm.logger", init_logger=logging.getLogger)
    _stub("vllm.utils.network_utils", get_ip=lambda: "127.0.0.1", get_tcp_uri=lambda ip, port: f"tcp://{ip}:{port}",
          is_valid_ipv6_address=lambda ip: ":" in ip, split_zmq_path=lambda p: tuple(p.rsplit(":", 2)))
    _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    mod = types.ModuleType("vllm.distributed.kv_events")
    mod.__file__ = str(path)
    sys.modules[mod.__name__] = mod
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    return mod
