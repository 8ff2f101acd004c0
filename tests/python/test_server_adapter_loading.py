"""Runtime adapter loading is a way into the server's file system, so it is
gated: off (404) without --enable-lora-loading; with it, lora_path is
confined to --lora-dir (no absolute path outside, no '..', no symlink out, no
device or FIFO), no error answer carries bytes of the file named, and with
API keys only an --admin-api-key may load or unload."""
import json
import os
import subprocess

import pytest

from server_util import assert_openai_error

ADMIN = "key-admin"
PLAIN = "key-plain"

PASSWD_BYTES = [b"root:", b"/bin/", b"746f6f72", b"0x746f"]  # /etc/passwd's bytes, raw or as hex


def load(server, name, path, api_key=ADMIN):
    return server.post_json("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, api_key=api_key)


def assert_no_file_bytes(data):
    for needle in PASSWD_BYTES:
        assert needle not in data, f"{needle!r} leaked in {data[:300]!r}"


@pytest.fixture(scope="module")
def good_adapter(serve_binary, model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-dir")
    out = root / "good"
    cmd = [str(serve_binary), "synth-adapter", "--model", str(model_path), "--out", str(out), "--rank", "4",
           "--seed", "5"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"`synth-adapter` failed (rc={p.returncode}): {p.stderr[-300:]}")
    return out


@pytest.fixture(scope="module")
def lora_dir(good_adapter):
    return good_adapter.parent


def test_disabled_by_default_every_adapter_endpoint_is_404(start_server, good_adapter):
    server = start_server("--max-model-len", 256, "--kv-cache-mb", 16)
    for path, body in [("/v1/load_lora_adapter", {"lora_name": "g", "lora_path": str(good_adapter)}),
                       ("/v1/load_lora_adapter", {"lora_name": "p", "lora_path": "/etc/passwd"}),
                       ("/v1/unload_lora_adapter", {"lora_name": "g"})]:
        status, data = server.post_json(path, body)
        err = assert_openai_error(status, data, 404, code="not_found")
        assert "--enable-lora-loading" in err["message"]
        assert_no_file_bytes(data)
    status, _, data = server.request("GET", "/v1/models")
    assert status == 200 and len(json.loads(data)["data"]) == 1  # the base only


@pytest.fixture(scope="module")
def server(start_module_server, lora_dir):
    return start_module_server("--max-model-len", 256, "--kv-cache-mb", 16, "--enable-lora-loading",
                               "--lora-dir", lora_dir, "--admin-api-key", f"{ADMIN}=t", "--api-key", f"{PLAIN}=t")


@pytest.mark.parametrize("make_path", [
    lambda d: "/etc/passwd",
    lambda d: "/dev/zero",
    lambda d: "../../../../../../etc/passwd",
    lambda d: str(d / ".." / ".." / ".." / ".." / "etc" / "passwd"),
    lambda d: "good/../../../etc/passwd",
], ids=["absolute-passwd", "dev-zero", "dotdot-relative", "dotdot-absolute", "dotdot-inside"])
def test_paths_outside_the_lora_dir_are_refused(server, lora_dir, make_path):
    status, data = load(server, "evil", make_path(lora_dir))
    assert_openai_error(status, data, 400, param="lora_path")
    assert_no_file_bytes(data)


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero", "/etc"])
def test_symlinks_out_of_the_lora_dir_are_refused(server, lora_dir, target):
    link = lora_dir / f"link-{os.path.basename(target)}"
    if not link.is_symlink():
        link.symlink_to(target)
    status, data = load(server, "evil", link.name)
    assert_openai_error(status, data, 400, param="lora_path")
    assert_no_file_bytes(data)


def test_a_fifo_inside_the_lora_dir_is_refused_not_hung(server, lora_dir):
    fifo = lora_dir / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    status, data = server.post_json("/v1/load_lora_adapter", {"lora_name": "f", "lora_path": "fifo"},
                                    api_key=ADMIN, timeout=10)
    assert_openai_error(status, data, 400, param="lora_path")


def test_a_non_adapter_file_inside_is_refused_without_its_bytes(server, lora_dir):
    # A copy of /etc/passwd inside the dir: the loader reads it and fails;
    # the client learns that, not the file's first bytes ("bad magic 0x746f6f72").
    copy = lora_dir / "passwd-copy"
    copy.write_bytes(open("/etc/passwd", "rb").read())
    status, data = load(server, "evil", "passwd-copy")
    err = assert_openai_error(status, data, 400, param="lora_path")
    assert "server log" in err["message"]
    assert_no_file_bytes(data)
    assert b"magic" not in data


def test_a_good_adapter_inside_loads_and_unloads(server, lora_dir):
    status, data = load(server, "good", "good")  # relative to --lora-dir
    assert status == 200, data
    status, data = server.post_json("/v1/completions", {"model": "good", "prompt": "Hi", "max_tokens": 1},
                                    api_key=PLAIN)
    assert status == 200, data
    status, data = server.post_json("/v1/unload_lora_adapter", {"lora_name": "good"}, api_key=ADMIN)
    assert status == 200, data
    status, data = load(server, "good-abs", lora_dir / "good")  # an absolute path inside
    assert status == 200, data


def test_only_admin_keys_load_and_unload(server):
    status, data = load(server, "x", "good", api_key=PLAIN)
    assert_openai_error(status, data, 403, code="insufficient_permissions")
    status, data = server.post_json("/v1/unload_lora_adapter", {"lora_name": "x"}, api_key=PLAIN)
    assert_openai_error(status, data, 403, code="insufficient_permissions")
    status, data = load(server, "x", "good", api_key=None)
    assert_openai_error(status, data, 401, code="invalid_api_key")


@pytest.mark.parametrize("args,needle", [
    (["--enable-lora-loading"], "--lora-dir"),
    (["--lora-dir", "/tmp"], "--enable-lora-loading"),
    (["--enable-lora-loading", "--lora-dir", "/nonexistent-lora-dir"], "not a directory"),
    (["--enable-lora-loading", "--lora-dir", "/tmp", "--api-key", "k=t"], "--admin-api-key"),
])
def test_bad_loading_flags_fail_before_serving(serve_binary, model_path, args, needle):
    p = subprocess.run([str(serve_binary), "serve", "--model", str(model_path), "--port", "0", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr


def test_an_adapter_of_another_base_is_refused_and_the_server_goes_on(server, serve_binary, lora_dir, tmp_path):
    # A well-formed PEFT adapter made for another model (the "tiny" synthetic
    # Llama): the shapes do not fit this base, so loading it is a clear 400
    # and every served model keeps answering, under an LR scheme too.
    other = tmp_path / "other.gguf"
    p = subprocess.run([str(serve_binary), "synth-model", "--preset", "tiny", "-o", str(other)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-300:]
    p = subprocess.run([str(serve_binary), "synth-adapter", "--model", str(other), "--out",
                        str(lora_dir / "other-base"), "--rank", "4"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-300:]
    status, data = load(server, "other", "other-base")
    err = assert_openai_error(status, data, 400, param="lora_path")
    assert "do not fit this base model" in err["message"], err
    assert "base_model.model" not in err["message"]  # the file's tensor names stay in the server log
    status, data = server.post_json("/v1/completions", {"model": "other", "prompt": "Hi", "max_tokens": 1},
                                    api_key=PLAIN)
    assert status == 404, data
    status, data = server.post_json("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                                        "kv_sharing": "lragent-base"}, api_key=PLAIN)
    assert status == 200, data
