"""The PEFT loader and the GGUF LoRA loader agree: `agentkv synth-adapter`
writes a random aLoRA, tools/adapters/peft_to_gguf.py (numpy + gguf, an
independent reimplementation of llama.cpp's convert_lora_to_gguf.py,
including the q/k RoPE permutation) converts it, and `agentkv adapter-info
--dump` shows both loaders producing identical matrices, scales and
invocation tokens; served side by side, both give the same logits."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "adapters"))
import peft_to_gguf  # noqa: E402


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def info(engine, model, adapter, dump):
    out = run([engine, "adapter-info", "--model", model, "--adapter", adapter, "--dump", dump])
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    tensors, meta = peft_to_gguf.read_safetensors(dump)
    return fields, tensors, meta


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_peft_and_gguf_loaders_agree(engine_path, model_path, repo_root, python_exe, tmp_path, dtype):
    peft = tmp_path / "peft"
    out = run([engine_path, "synth-adapter", "--model", model_path, "--out", peft, "--rank", "4", "--seed", "7",
               "--dtype", dtype, "--alora-invocation", "<|im_start|>assistant"])
    # The default magnitude: ~3% of the base projection's output norm.
    ratios = [float(line.split("|")[2]) for line in out.splitlines() if line.startswith("| ") and "_proj" in line]
    assert len(ratios) == 7 and all(0.02 < r < 0.04 for r in ratios), out

    gguf_path = tmp_path / "adapter.gguf"
    run([python_exe, repo_root / "tools" / "adapters" / "peft_to_gguf.py", "--base", model_path,
         "--outfile", gguf_path, peft])

    f_peft, t_peft, m_peft = info(engine_path, model_path, peft, tmp_path / "peft.dump.safetensors")
    f_gguf, t_gguf, m_gguf = info(engine_path, model_path, gguf_path, tmp_path / "gguf.dump.safetensors")
    assert f_peft["kind"] == f_gguf["kind"] == "alora"
    assert f_peft["invocation_tokens"] == f_gguf["invocation_tokens"]
    assert len(f_peft["invocation_tokens"].split()) >= 2
    assert f_peft["id"] != f_gguf["id"], "different bytes, different identity"
    assert m_peft == m_gguf
    assert sorted(t_peft) == sorted(t_gguf)
    assert len(t_peft) == 30 * 7 * 3
    for name in t_peft:
        np.testing.assert_array_equal(t_peft[name], t_gguf[name], err_msg=name)


def test_permutation_is_visible(engine_path, model_path, tmp_path):
    """The PEFT loader really permutes q/k B (and only those) for this llama base."""
    peft = tmp_path / "peft"
    run([engine_path, "synth-adapter", "--model", model_path, "--out", peft, "--rank", "2", "--targets", "q,k,v"])
    _, loaded, _ = info(engine_path, model_path, peft, tmp_path / "dump.safetensors")
    raw, _ = peft_to_gguf.read_safetensors(peft / "adapter_model.safetensors")
    name = "base_model.model.model.layers.{}.self_attn.{}.lora_{}.weight"
    for proj, heads in (("q_proj", 9), ("k_proj", 3)):
        b = raw[name.format(3, proj, "B")]
        np.testing.assert_array_equal(loaded[f"layers.3.{proj}.b"], peft_to_gguf.permute(b, heads))
        assert not np.array_equal(loaded[f"layers.3.{proj}.b"], b)
        np.testing.assert_array_equal(loaded[f"layers.3.{proj}.a"], raw[name.format(3, proj, "A")])
    np.testing.assert_array_equal(loaded["layers.3.v_proj.b"], raw[name.format(3, "v_proj", "B")])


def test_shared_a_group(engine_path, model_path, tmp_path):
    dirs = []
    for seed in (1, 2):
        d = tmp_path / f"s{seed}"
        run([engine_path, "synth-adapter", "--model", model_path, "--out", d, "--rank", "2", "--targets", "q",
             "--seed", seed, "--shared-a", "team"])
        dirs.append(peft_to_gguf.read_safetensors(d / "adapter_model.safetensors")[0])
    a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    b = a.replace("lora_A", "lora_B")
    np.testing.assert_array_equal(dirs[0][a], dirs[1][a])
    assert not np.array_equal(dirs[0][b], dirs[1][b])


def test_bad_adapters_fail_cleanly(engine_path, model_path, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 2, "target_modules": ["lm_head"]}')
    (bad / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    p = subprocess.run([str(engine_path), "adapter-info", "--model", str(model_path), "--adapter", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "unsupported target module 'lm_head'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_gguf_and_peft_alora_give_the_same_logits(engine_path, model_path, repo_root, python_exe, tmp_path,
                                                  start_server):
    """The same aLoRA as a PEFT directory and as a llama.cpp GGUF LoRA, served
    side by side: greedy tokens and top-5 logprobs agree, with sharing on."""
    peft = tmp_path / "peft"
    run([engine_path, "synth-adapter", "--model", model_path, "--out", peft, "--rank", "8", "--seed", "3",
         "--alora-invocation", "<|im_start|>assistant"])
    gguf_path = tmp_path / "adapter.gguf"
    run([python_exe, repo_root / "tools" / "adapters" / "peft_to_gguf.py", "--base", model_path,
         "--outfile", gguf_path, peft])
    server = start_server("--adapter", f"judge_peft={peft}", "--adapter", f"judge_gguf={gguf_path}",
                          "--kv-sharing", "alora")
    prompt = ("<|im_start|>user\nIs the sky green? Answer in one word.<|im_end|>\n"
              "<|im_start|>assistant\nNo.<|im_end|>\n<|im_start|>assistant")
    outs = {}
    for name in ["base", "judge_peft", "judge_gguf"]:
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 5}
        if name != "base":
            body["model"] = name
        status, data = server.post_json("/v1/completions", body)
        assert status == 200, data
        outs[name] = json.loads(data)
    lp = {k: v["choices"][0]["logprobs"] for k, v in outs.items()}
    assert lp["judge_peft"]["tokens"] == lp["judge_gguf"]["tokens"]
    np.testing.assert_allclose(lp["judge_peft"]["token_logprobs"], lp["judge_gguf"]["token_logprobs"], rtol=0,
                               atol=1e-5)
    for a, b in zip(lp["judge_peft"]["top_logprobs"], lp["judge_gguf"]["top_logprobs"]):
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=0, atol=1e-5)
    # The adapter is active: its logprobs differ from the base's.
    assert lp["judge_peft"]["token_logprobs"] != lp["base"]["token_logprobs"]
    # With sharing on, the adapter's prompt hit the base's blocks before the invocation.
    assert outs["judge_peft"]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
