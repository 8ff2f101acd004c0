"""Start and stop `agentkv serve` for the end-to-end server tests, and the
small HTTP helpers they share (raw requests, SSE reading, /metrics parsing).

The server is started on an ephemeral port (--port 0); the port is read from
the `agentkv: listening on http://HOST:PORT` line on stderr. stderr is drained
by a thread for the whole life of the process (a full pipe would block the
server) and its last lines are kept for error messages."""
import collections
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

LISTEN_RE = re.compile(r"agentkv: listening on http://([^\s:/]+):(\d+)")
METRIC_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (for a process to bind next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_available(binary):
    """True when the binary has the `serve` command (older builds have none,
    and answer `serve --help` with the top-level help and exit code 0)."""
    try:
        r = subprocess.run([str(binary), "serve", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and re.search(rb"Usage: \S+ serve\b", r.stdout) is not None


class Server:
    """One `agentkv serve` process. `args` are extra command-line flags."""

    def __init__(self, binary, model, args=(), threads=2, startup_timeout=120):
        self.cmd = [str(binary), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0",
                    "--threads", str(threads), *map(str, args)]
        self.stderr_tail = collections.deque(maxlen=400)
        self._listening = threading.Event()
        self.host = None
        self.port = None
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        try:
            self._wait_ready(startup_timeout)
        except Exception:
            self.kill()
            raise

    # -- lifecycle -----------------------------------------------------------------

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stderr_tail.append(line)
            m = LISTEN_RE.search(line)
            if m and not self._listening.is_set():
                self.host, self.port = m.group(1), int(m.group(2))
                self._listening.set()
        self._listening.set()  # EOF: the process is gone; unblock the waiter

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        if not self._listening.wait(timeout) or self.port is None:
            raise RuntimeError(f"server did not print its address (rc={self.proc.poll()}):\n{self.log()}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _, _ = self.request("GET", "/health", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"/health not 200 within {timeout} s:\n{self.log()}")

    def log(self, n=60):
        return "\n".join(list(self.stderr_tail)[-n:])

    @property
    def pid(self):
        return self.proc.pid

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self):
        return self.url + "/v1"

    def terminate(self):
        """Sends SIGTERM (the drain signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout):
        """The exit code, or None when still running after `timeout` s."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._reader.join(5)

    def stop(self, timeout=60):
        """SIGTERM, then the exit code; a server still up after `timeout` s is
        killed and reported as None."""
        self.terminate()
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
        self._reader.join(5)
        return rc

    def rss_kib(self):
        """VmRSS of the server process in KiB (Linux)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    # -- HTTP ----------------------------------------------------------------------

    def connection(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """One raw request: (status, headers dict with lower-case names, body bytes).
        `body` may be bytes or a JSON-serialisable object."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def post_json(self, path, obj, api_key=None, timeout=120):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        status, _, data = self.request("POST", path, obj, headers, timeout)
        return status, data

    def metrics(self):
        status, _, data = self.request("GET", "/metrics", timeout=30)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {data[:200]!r}")
        return parse_metrics(data.decode())


def parse_metrics(text):
    """Prometheus text format -> {(name, frozenset(labels.items())): value}.
    Raises ValueError on a line that is not a comment or a sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_RE.match(line)
        if not m:
            raise ValueError(f"bad metrics line: {line!r}")
        labels = frozenset(LABEL_RE.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(samples, name, **labels):
    """The value of one sample (0.0 when absent, as counters start there)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def read_sse(resp):
    """Reads an SSE response to the end: (list of JSON chunks, saw [DONE],
    raw data lines that were neither JSON nor [DONE])."""
    chunks, done, bad = [], False, []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        if done:
            bad.append("after [DONE]: " + data)
            continue
        try:
            chunks.append(json.loads(data))
        except ValueError:
            bad.append(data)
    return chunks, done, bad


def assert_openai_error(status, data, expected_status, param=None, code=None):
    """The body is {"error": {"message": str, "type": str, "param", "code"}}."""
    assert status == expected_status, f"status {status}, want {expected_status}: {data[:300]!r}"
    try:
        body = json.loads(data)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {data[:300]!r}")
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def env_threads():
    return int(os.environ.get("AGENTKV_TEST_THREADS", "2"))
