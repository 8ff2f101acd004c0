"""Graceful shutdown: SIGTERM while 8 streams are running lets every stream
finish (finish_reason and [DONE]), refuses new work, and exits 0."""
import json
import threading
import time

import pytest

from server_util import assert_openai_error

N_STREAMS = 8
MAX_TOKENS = 48


class Stream(threading.Thread):
    """One streamed completion over raw HTTP, recording what arrived when."""

    def __init__(self, server, i):
        super().__init__(daemon=True)
        self.server, self.i = server, i
        self.first_chunk = threading.Event()
        self.chunks_at_sigterm = None
        self.status = None
        self.chunks, self.done, self.bad, self.error = [], False, [], None

    def run(self):
        try:
            conn = self.server.connection(timeout=120)
            body = {"model": "drain", "prompt": f"Story {self.i}: Once upon a time", "max_tokens": MAX_TOKENS,
                    "temperature": 0, "stream": True}
            conn.request("POST", "/v1/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.status = resp.status
            if resp.status != 200:
                self.bad.append(resp.read().decode("utf-8", "replace"))
                return
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    self.done = True
                elif self.done:
                    self.bad.append("after [DONE]: " + data)
                else:
                    self.chunks.append(json.loads(data))
                    self.first_chunk.set()
        except Exception as e:  # reported by the test, not lost in the thread
            self.error = e
        finally:
            self.first_chunk.set()

    def finish_reasons(self):
        return [c["choices"][0]["finish_reason"] for c in self.chunks
                if c.get("choices") and c["choices"][0].get("finish_reason")]


def test_sigterm_drains_running_streams(start_server):
    server = start_server("--served-model-name", "drain", "--max-running", 16, "--shutdown-timeout", 60,
                          clean_exit=False)  # the exit code is asserted here
    streams = [Stream(server, i) for i in range(N_STREAMS)]
    for s in streams:
        s.start()
    for s in streams:
        assert s.first_chunk.wait(120), f"stream {s.i} got no first chunk"
        assert s.error is None and s.status == 200, (s.status, s.error, s.bad)
    for s in streams:
        s.chunks_at_sigterm = len(s.chunks)
    server.terminate()

    # New work is refused while the old finishes.
    time.sleep(0.2)
    try:
        status, _, data = server.request("POST", "/v1/completions",
                                         {"model": "drain", "prompt": "Late", "max_tokens": 2}, timeout=30)
        assert_openai_error(status, data, 503)
    except (ConnectionRefusedError, ConnectionResetError):
        pass

    for s in streams:
        s.join(120)
        assert not s.is_alive(), f"stream {s.i} still running"
        assert s.error is None, f"stream {s.i}: {s.error!r}"
        assert s.bad == [], s.bad
        assert s.done, f"stream {s.i} ended without [DONE] after {len(s.chunks)} chunks"
        assert s.finish_reasons() in (["length"], ["stop"]), s.chunks[-3:]
    # At least one stream was mid-flight at SIGTERM, or the test proved nothing.
    assert any(len(s.chunks) > s.chunks_at_sigterm for s in streams), \
        [(s.chunks_at_sigterm, len(s.chunks)) for s in streams]
    rc = server.wait(90)
    assert rc == 0, f"exit code {rc}\n{server.log()}"


def test_sigterm_when_idle_exits_zero(start_server):
    server = start_server(clean_exit=False)
    status, _, _ = server.request("GET", "/health")
    assert status == 200
    t0 = time.monotonic()
    server.terminate()
    assert server.wait(30) == 0, server.log()
    assert time.monotonic() - t0 < 10
    with pytest.raises(OSError):
        server.request("GET", "/health", timeout=5)
