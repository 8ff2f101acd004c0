#!/usr/bin/env python3
"""Reference token ids, pre-tokenizer splits and chat renderings for the
tokenizer tests, from independent implementations: HF `tokenizers` built
from the vocabulary and merges read out of the GGUF with the `gguf` package
(no hub, no network), and `jinja2` rendering the chat templates.

Exact command that produced tests/data/tokenizer/expected_smollm.json:
  python3 tools/reference/tokenizer_ref.py \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --corpus tests/data/tokenizer/corpus.json \
      --out tests/data/tokenizer/expected_smollm.json

Contents:
  smollm.cases[i]       ids of corpus[i] with control tokens parsed (ids_special) and as text (ids_plain)
  variants.<kind>[i]    ids of corpus[i] (control tokens parsed) with the model's vocabulary and merges
                        behind the gpt2 / llama3 (ignore_merges) / qwen2 pre-tokenizers
  pretok.<kind>[i]      pre-tokenizer pieces of corpus[i] for gpt2 / smollm / llama3 / qwen2
  spm                   a synthetic SentencePiece vocabulary (tokens, scores, types) and the ids
                        HF's BPE (byte_fallback, score-ordered merges) gives for every corpus string
  chat                  templates (the model's, and Llama 3 / Mistral ones written for this test),
                        a conversation, and jinja2's rendering
"""
import argparse
import json
import sys

import jinja2
import numpy as np
from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

CONTROL, USER_DEFINED, UNKNOWN, BYTE, NORMAL = 3, 4, 2, 6, 1

GPT2_RX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_RX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
             r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_RX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
            r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def field_strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(r, key):
    f = r.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def field_scalar(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    if isinstance(v, np.ndarray) and v.dtype == np.uint8 and len(f.types) == 1 and f.types[0].name == "STRING":
        return bytes(v).decode("utf-8")
    return v.tolist()[0] if hasattr(v, "tolist") else v


def smollm_tokenizer(r):
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    types = field_ints(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    # SmolLM2's tokenizer.json: digits split one by one, then GPT-2's byte-level regex.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == CONTROL])
    for t, ty in zip(tokens, types):
        assert ty in (CONTROL, NORMAL), (t, ty)
    return tok, tokens


def variant_tokenizer(r, kind):
    """The model's vocabulary and merges behind another family's pre-tokenizer
    (we have no Llama 3 / Qwen2 / GPT-2 model file): exercises the whole
    pipeline for those pre-tokenizers, including Llama 3's ignore_merges."""
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    types = field_ints(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        rx = LLAMA3_RX if kind == "llama3" else QWEN2_RX
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(rx), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == CONTROL])
    return tok


def encode(tok, s, parse_special):
    tok.encode_special_tokens = not parse_special
    ids = tok.encode(s, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return ids


def pretok_splits(corpus):
    split = lambda rx: pre_tokenizers.Split(Regex(rx), behavior="isolated")
    kinds = {
        "gpt2": split(GPT2_RX),
        "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split(GPT2_RX)]),
        "llama3": split(LLAMA3_RX),
        "qwen2": split(QWEN2_RX),
    }
    out = {k: [[p for p, _ in pt.pre_tokenize_str(s)] for s in corpus] for k, pt in kinds.items()}
    # The GPT-2 regex above must be the one inside HF's ByteLevel pre-tokenizer.
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    byte_dec = {ord(c): b for b, c in enumerate(bytes_to_unicode())}
    for s, pieces in zip(corpus, out["gpt2"]):
        bl_pieces = [bytes(byte_dec[ord(c)] for c in p).decode("utf-8") for p, _ in bl.pre_tokenize_str(s)]
        assert bl_pieces == pieces, (s, bl_pieces, pieces)
    return out


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


SPM_TRAIN_TEXT = """The quick brown fox jumps over the lazy dog. A tokenizer splits text into pieces.
SentencePiece replaces spaces with a meta symbol and merges the most likely pairs first.
Hello world, hello there; the weather is nice and the tests are many. Numbers like 123 and 2024 appear.
Code: def main(): return 0. Strings with quotes "like this" and 'that'. Ça va? Très bien, merci.
""" * 3


def spm_vocab():
    """A small SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens,
    one user-defined token, then pieces learned by HF's BPE trainer over
    U+2581-joined text; a piece's score is minus its rank, as in llama vocabs."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=420, show_progress=False, special_tokens=[])
    trainer_tok.train_from_iterator(SPM_TRAIN_TEXT.splitlines(), trainer=trainer)
    learned = sorted(trainer_tok.get_vocab().items(), key=lambda kv: kv[1])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["<|tool|>"]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [USER_DEFINED]
    scores = [0.0] * len(tokens)
    for rank, (piece, _) in enumerate(learned):
        tokens.append(piece)
        types.append(NORMAL)
        # Single characters last, so they are never preferred as merge results.
        scores.append(float(-rank) if len(piece) > 1 else -1e6 - rank)
    return tokens, scores, types


def spm_tokenizer(tokens, scores, types):
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == NORMAL}
    # Score-ordered merges over every split of every piece, the way HF's
    # LlamaConverter derives merges from a SentencePiece model.
    merges = []
    for piece, pid in normal.items():
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in normal and b in normal:
                merges.append((-scores[pid], pid, normal[a], normal[b], a, b))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(m[4], m[5]) for m in merges], unk_token="<unk>",
                               byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty in (CONTROL, UNKNOWN)])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED])
    return tok


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


def render(template, messages, add_generation_prompt, eos):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # what transformers uses
    env.globals["raise_exception"] = raise_exception
    # BOS is left out of the text: the engine adds it as a token when encoding.
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token="", eos_token=eos)


def chat_cases(model_template):
    two_turns = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is 4."},
                 {"role": "user", "content": "And 3+3?"}]
    with_system = [{"role": "system", "content": "You answer tersely."}] + two_turns
    padded = [{"role": "user", "content": "  spaced out \n"}, {"role": "assistant", "content": "\nok "}]
    cases = []
    for name, tpl, eos, convs in (("chatml", model_template, "<|im_end|>", [two_turns, with_system, padded]),
                                  ("llama3", LLAMA3_TEMPLATE, "<|eot_id|>", [two_turns, with_system, padded]),
                                  ("mistral", MISTRAL_TEMPLATE, "</s>", [two_turns, padded])):
        for msgs in convs:
            for gen in (True, False):
                cases.append({"kind": name, "template": tpl, "messages": msgs, "add_generation_prompt": gen,
                              "rendered": render(tpl, msgs, gen, eos)})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    corpus = json.load(open(a.corpus, encoding="utf-8"))["strings"]
    r = GGUFReader(a.model)
    assert field_scalar(r, "tokenizer.ggml.model") == "gpt2" and field_scalar(r, "tokenizer.ggml.pre") == "smollm"
    tok, tokens = smollm_tokenizer(r)
    smollm = []
    for s in corpus:
        ids_special, ids_plain = encode(tok, s, True), encode(tok, s, False)
        smollm.append({"ids_special": ids_special, "ids_plain": ids_plain})

    variants = {}
    for kind in ("gpt2", "llama3", "qwen2"):
        vt = variant_tokenizer(r, kind)
        variants[kind] = [encode(vt, s, True) for s in corpus]

    sp_tokens, sp_scores, sp_types = spm_vocab()
    sp = spm_tokenizer(sp_tokens, sp_scores, sp_types)
    spm_cases = []
    for s in corpus:
        ids_special, ids_plain = encode(sp, s, True), encode(sp, s, False)
        spm_cases.append({"ids_special": ids_special, "ids_plain": ids_plain,
                          "decoded_plain": sp.decode(ids_plain, skip_special_tokens=True)})

    out = {
        "model": a.model.split("/")[-1],
        "n_tokens": len(tokens),
        "smollm": {"cases": smollm},
        "pretok": pretok_splits(corpus),
        "variants": variants,
        "spm": {"tokens": sp_tokens, "scores": sp_scores, "types": sp_types, "cases": spm_cases},
        "chat": chat_cases(field_scalar(r, "tokenizer.chat_template")),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}: {len(corpus)} strings", file=sys.stderr)


if __name__ == "__main__":
    main()
