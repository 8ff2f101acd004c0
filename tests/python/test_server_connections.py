"""`agentkv serve` against clients that hold connections without finishing a
request: 1000 idle or half-open connections must not keep /health or a
completion from another client waiting; read deadlines close slow clients;
past --max-connections a new connection gets 503 with OpenAI's error body.

Loopback only, bounded: every socket has a timeout and is closed by the test."""
import json
import resource
import socket
import time

import pytest

from server_util import metric

N_FLOOD = 1000


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"this test opens {need} sockets; the open file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def open_sockets(server, n, first_bytes=b""):
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection((server.host, server.port), timeout=10)
            if first_bytes:
                s.sendall(first_bytes)
            socks.append(s)
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks):
    for s in socks:
        s.close()


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def wait_for(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def closed_by_server(sock, timeout):
    """Seconds until the server closed `sock` (EOF or reset), reading and
    discarding what it sends; None if still open after `timeout`."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < timeout:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic() - t0
    return None


COMPLETION = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}


def test_health_and_completion_answer_under_1000_idle_connections(start_server):
    raise_fd_limit(2 * N_FLOOD + 256)
    server = start_server("--max-model-len", 256, "--kv-cache-mb", 16)
    status, _ = server.post_json("/v1/completions", COMPLETION)  # warm up
    assert status == 200
    # Half of them never send a byte; half stop in the middle of the headers.
    idle = open_sockets(server, N_FLOOD // 2)
    half = open_sockets(server, N_FLOOD // 2,
                        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n")
    try:
        # Every one of them is accepted and held by the server, not left in
        # the listen backlog (where it would cost the server nothing).
        assert wait_for(lambda: metric(server.metrics(), "agentkv_http_connections_open") >= N_FLOOD, 20), \
            metric(server.metrics(), "agentkv_http_connections_open")
        for _ in range(3):
            (status, _, body), dt = timed(lambda: server.request("GET", "/health", timeout=5))
            assert status == 200, body
            assert dt < 1.0, f"/health took {dt:.2f} s with {N_FLOOD} idle connections"
            (status, body), dt = timed(lambda: server.post_json("/v1/completions", COMPLETION, timeout=5))
            assert status == 200, body
            assert dt < 1.0, f"a 2-token completion took {dt:.2f} s with {N_FLOOD} idle connections"
    finally:
        close_all(idle + half)
    # The server lets go of them once the clients do.
    assert wait_for(lambda: metric(server.metrics(), "agentkv_http_connections_open") <= 2, 10)


@pytest.fixture(scope="module")
def strict(start_module_server):
    """A server with a small connection cap and short deadlines."""
    return start_module_server("--max-model-len", 256, "--kv-cache-mb", 16, "--max-connections", 20,
                               "--header-timeout", 1, "--body-timeout", 1, "--keep-alive-timeout", 1)


def test_silent_client_is_closed_at_the_header_deadline(strict):
    (s,) = open_sockets(strict, 1)
    with s:
        dt = closed_by_server(s, 5)
    assert dt is not None and 0.7 < dt < 3, dt


def test_slowloris_is_closed_at_the_header_deadline(strict):
    (s,) = open_sockets(strict, 1, b"GET /health HTTP/1.1\r\n")
    t0 = time.monotonic()
    with s:
        closed = False
        # One header byte every 0.2 s: each read is quick, the headers never end.
        while time.monotonic() - t0 < 5 and not closed:
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(0.2)
            try:
                closed = s.recv(4096) == b""
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
    dt = time.monotonic() - t0
    assert closed and dt < 3, dt


def test_slow_body_is_closed_at_the_body_deadline(strict):
    (s,) = open_sockets(strict, 1, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 100\r\n\r\n{\"prompt\":")
    with s:
        dt = closed_by_server(s, 5)
    assert dt is not None and dt < 3, dt


def test_idle_keep_alive_connection_is_closed(strict):
    conn = strict.connection(timeout=5)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        assert resp.status == 200
        resp.read()
        dt = closed_by_server(conn.sock, 5)
        assert dt is not None and 0.5 < dt < 3, dt
    finally:
        conn.close()


def test_connection_cap_answers_503_with_an_openai_error(strict):
    held = open_sockets(strict, 20)
    try:
        # Once the server has accepted all 20, the next connection is turned away.
        def refused():
            status, headers, body = strict.request("GET", "/health", timeout=5)
            return (status, headers, body) if status == 503 else None
        got = None
        deadline = time.monotonic() + 5
        while got is None and time.monotonic() < deadline:
            got, dt = timed(refused)
            assert dt < 1.0, f"the 503 took {dt:.2f} s"
        assert got is not None, "no 503 past --max-connections"
        status, headers, body = got
        assert headers.get("connection") == "close"
        err = json.loads(body)["error"]
        assert err["code"] == "too_many_connections" and err["type"] == "server_error", err
        assert "20" in err["message"], err
        # A client still sending its body when it is turned away reads the
        # 503 too, rather than a reset (the server closes after it is done).
        for _ in range(5):
            status, _, body = strict.request("POST", "/v1/completions", b'{"pad": "' + b"x" * 200_000 + b'"}',
                                             timeout=5)
            assert status == 503, body
    finally:
        close_all(held)
    # Room again once they are gone.
    assert wait_for(lambda: strict.request("GET", "/health", timeout=5)[0] == 200, 5)
    m = strict.metrics()
    assert metric(m, "agentkv_http_connections_rejected_total") >= 1
