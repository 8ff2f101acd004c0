"""The LRAgent role task (tools/lragent/task.py) and the trained role adapters
in tools/lragent/adapters: the generator is seeded and deterministic, every
answer follows from the records (checked by a solver of its own over the
rendered text), and the adapters on disk are well-formed PEFT LoRA (r = 8 on
q_proj / v_proj, one v_proj lora_A shared by plan, action and reflect).
No JAX needed."""
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
LRA = ROOT / "tools" / "lragent"
ADAPTERS = LRA / "adapters"
sys.path.insert(0, str(LRA))

import task  # noqa: E402
import train_roles  # noqa: E402  (numpy only at import time)

ROLE_DIRS = ("plan", "action", "reflect")


def test_generator_is_deterministic():
    a = [task.make_instance(7, i) for i in range(20)]
    b = [task.make_instance(7, i) for i in range(20)]
    assert a == b
    assert [task.context_text(x) for x in a] == [task.context_text(x) for x in b]
    # Another seed, or another index, gives other instances.
    assert task.make_instance(8, 0) != task.make_instance(7, 0)
    assert task.make_instance(7, 1) != task.make_instance(7, 0)
    # Pinned: the first eval question of seed 0 (a change of the generator
    # changes the benchmark; update this and retrain if it is on purpose).
    first = task.make_instance(0, 0)
    assert (first["person"], first["relation"], first["city"], first["answer"]) == \
        ("Nadia Halkin", "born", "Quorwick", "Dornmark")


def _solve(context):
    """Independent of task.py: parses the rendered prompt, follows the question's
    person and relation to a city, then the city to its country."""
    q = re.search(r"Question: In which country (does|was) (.+?) (work|live|born)\?", context)
    assert q, context
    person, verb = q.group(2), {"work": "works in", "live": "lives in", "born": "was born in"}[q.group(3)]
    cities = re.findall(rf"^- {re.escape(person)} {verb} (\w+)\.$", context, flags=re.M)
    assert len(cities) == 1, (person, verb, cities)
    countries = re.findall(rf"^- {re.escape(cities[0])} is a city in (\w+)\.$", context, flags=re.M)
    assert len(countries) == 1
    return cities[0], countries[0]


@pytest.mark.parametrize("seed", [0, 1, 101, 201])
def test_every_answer_follows_from_the_records(seed):
    for i in range(300):
        inst = task.make_instance(seed, i)
        ctx = task.context_text(inst)
        city, country = _solve(ctx)
        assert (city, country) == (inst["city"], inst["answer"])
        # The structured data agree with the text, and the distractors exist:
        # other people, other relations, other countries.
        assert inst["people"][inst["person"]][inst["relation"]] == city
        assert inst["city_country"][city] == country
        assert len(set(inst["city_country"].values())) == len(inst["city_country"])
        assert task.solve_from_text(inst) == country
        # The gold trajectory ends in the answer, and is scored correct.
        lines = task.gold_lines(inst)
        assert [r for r, _ in lines] == list(task.ROLE_SEQUENCE)
        assert task.is_correct(inst, lines[-1][1])
        assert not task.is_correct(inst, "Answer: " + city)


def test_scoring():
    inst = task.make_instance(0, 0)
    assert task.is_correct(inst, "Answer: Dornmark")
    assert task.is_correct(inst, " answer:  dornmark. ")
    assert task.is_correct(inst, "Dornmark")
    assert not task.is_correct(inst, "Answer: Dornmark or Marrar")
    assert not task.is_correct(inst, "")


def test_prompt_and_line_lengths(model_path):
    import llama_ref
    tok = llama_ref.make_tokenizer(str(model_path))
    enc = lambda s: llama_ref.encode(tok, s)  # noqa: E731
    assert enc("\n") == [198]
    for i in range(30):
        inst = task.make_instance(0, i)
        ids, spans = task.trajectory_ids(enc, inst, 198)
        assert 150 <= spans[0][1] <= 400
        for role, s, e in spans:
            assert e - s <= 33 and ids[e - 1] == 198  # <= 32 tokens, then the end marker
            assert enc(task.LABELS[role]) == ids[s - len(enc(task.LABELS[role])):s]
        # The line pieces tokenize as the whole text does (so training's ids
        # are what a pipeline that appends ids produces).
        text = task.context_text(inst) + "".join(l + "\n" for _, l in task.gold_lines(inst))
        assert enc(text) == ids


# ---- adapters on disk ---------------------------------------------------------

def _read_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        dt = {"F32": "<f4", "F16": "<f2"}[e["dtype"]]
        s, t = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + s:8 + n + t], dt).reshape(e["shape"])
    return out


def _adapter(name):
    d = ADAPTERS / name
    if not (d / "adapter_model.safetensors").is_file():
        pytest.skip(f"{d} not trained (tools/lragent/train_roles.py)")
    return json.loads((d / "adapter_config.json").read_text()), _read_safetensors(d / "adapter_model.safetensors")


@pytest.mark.parametrize("name", ROLE_DIRS)
def test_role_adapter_shapes(name):
    cfg, t = _adapter(name)
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM"
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16
    assert sorted(cfg["target_modules"]) == ["q_proj", "v_proj"]
    # SmolLM2-135M: 30 layers, d_model 576, 9 heads and 3 KV heads of 64.
    assert len(t) == 30 * 2 * 2
    for layer in range(30):
        p = f"base_model.model.model.layers.{layer}.self_attn."
        assert t[p + "q_proj.lora_A.weight"].shape == (8, 576)
        assert t[p + "q_proj.lora_B.weight"].shape == (576, 8)
        assert t[p + "v_proj.lora_A.weight"].shape == (8, 576)
        assert t[p + "v_proj.lora_B.weight"].shape == (192, 8)
    for a in t.values():
        assert np.all(np.isfinite(a))
    # Trained: B moved away from its zero init.
    assert all(np.abs(a).max() > 0 for k, a in t.items() if "lora_B" in k)
    assert (ADAPTERS / name / "adapter_model.safetensors").stat().st_size < 8 << 20


def test_shared_v_proj_a_is_bit_identical():
    ts = [_adapter(n)[1] for n in ROLE_DIRS]
    for layer in range(30):
        va = f"base_model.model.model.layers.{layer}.self_attn.v_proj.lora_A.weight"
        qa = f"base_model.model.model.layers.{layer}.self_attn.q_proj.lora_A.weight"
        assert ts[0][va].tobytes() == ts[1][va].tobytes() == ts[2][va].tobytes()
        # Only v_proj's A is shared.
        assert ts[0][qa].tobytes() != ts[1][qa].tobytes()


# The dose-response sets (docs/benchmarks.md, "LRAgent dose-response"): each
# committed with its training report, its v_proj A shared by the three roles.
DOSE_SETS = sorted(d.name for d in LRA.glob("adapters_lr*") if (d / "plan").is_dir())


@pytest.mark.parametrize("name", DOSE_SETS or ["none committed"])
def test_each_dose_response_set_has_its_report_and_one_v_proj_a(name):
    if name == "none committed":
        assert not list(LRA.glob("adapters_lr*"))
        return
    d = LRA / name
    report = json.loads((d / "train_report.json").read_text())
    assert report["args"]["seed"] == 0 and report["args"]["out"].endswith(name)
    assert report["args"]["lr"] == float(name.replace("adapters_lr", "").split("_")[0])
    if name.endswith("_ep4"):
        assert report["args"]["epochs"] == 4
    ts = [_read_safetensors(d / r / "adapter_model.safetensors") for r in ("plan", "action", "reflect")]
    for layer in range(30):
        va = f"base_model.model.model.layers.{layer}.self_attn.v_proj.lora_A.weight"
        assert ts[0][va].tobytes() == ts[1][va].tobytes() == ts[2][va].tobytes()


def test_q_rows_unpermute_is_the_loaders_inverse():
    # peft_loader permutes HF rows to GGUF order: GGUF row h*hd + 2i + j comes
    # from HF row h*hd + j*hd/2 + i. train_roles trains in GGUF order and saves
    # unpermute_rows(B); permuting it as the loader does must give B back.
    n_head, hd, r = 9, 64, 8
    b = np.random.default_rng(0).standard_normal((n_head * hd, r))
    hf = train_roles.unpermute_rows(b, n_head)
    back = np.empty_like(hf)
    half = hd // 2
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                back[h * hd + 2 * i + j] = hf[h * hd + j * half + i]
    assert np.array_equal(back, b)


@pytest.mark.parametrize("name", ROLE_DIRS)
def test_adapter_loads_in_engine(name, engine_path, model_path):
    _adapter(name)
    r = subprocess.run([str(engine_path), "adapter-info", "--model", str(model_path), "--adapter",
                        str(ADAPTERS / name)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "lora" in r.stdout


def test_icarus_adapter(engine_path, model_path):
    cfg, t = _adapter("icarus_reflect")
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16
    # Decoder rows write no K/V: no k_proj / v_proj LoRA.
    assert not {"k_proj", "v_proj"} & set(cfg["target_modules"])
    for a in t.values():
        assert a.shape[0] == 8 or a.shape[1] == 8
    r = subprocess.run([str(engine_path), "adapter-info", "--model", str(model_path), "--adapter",
                        str(ADAPTERS / "icarus_reflect"), "--kind", "icarus"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "kind: icarus" in r.stdout


def test_teacher_forced_kl_against_direct_sum():
    """kl_vs_none.kl_top against the KL computed directly from two full
    distributions: equal when the scheme's top holds every token of none's,
    a lower bound when a token falls outside it (its floor stands in)."""
    import math

    import kl_vs_none

    p = {"a": math.log(0.7), "b": math.log(0.2), "c": math.log(0.1)}
    q = {"a": math.log(0.5), "b": math.log(0.3), "c": math.log(0.2)}
    direct = sum(math.exp(lp) * (lp - q[t]) for t, lp in p.items())
    kl, mass, agree = kl_vs_none.kl_top(p, q)
    assert kl == pytest.approx(direct, rel=1e-12)
    assert mass == pytest.approx(1.0) and agree
    assert kl_vs_none.kl_top(p, p)[0] == 0.0
    # "c" outside the scheme's top: its logprob is taken as the floor log 0.3,
    # above its true value log 0.2, so the figure is below the true KL.
    q_top = {"b": math.log(0.3), "a": math.log(0.5)}
    kl_low, _, _ = kl_vs_none.kl_top(p, q_top)
    assert kl_low < direct
    assert kl_vs_none.kl_top(p, {"b": 0.0, "a": -1.0})[2] is False
