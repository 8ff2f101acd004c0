"""Write the Hugging Face directory Dynamo's frontend reads (config.json,
tokenizer.json, tokenizer_config.json, generation_config.json) from a GGUF
file: Dynamo 1.6.1 takes a model card from a local HF directory, not a GGUF.

The tokenizer is the byte-level BPE of the file's own vocabulary and merges
(tools/reference/llama_ref.py's, checked token for token against agentkv's in
tests/python/test_tokenizer.py); the chat template is the file's own
`tokenizer.chat_template`. Only gpt2-style BPE files (SmolLM2) are supported
so far; other tokenizers are refused with a message naming them.

    .venv-dynamo/bin/python tools/dynamo/hf_dir.py MODEL.gguf OUT_DIR
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import gguf  # noqa: E402
import llama_ref  # noqa: E402


def field(reader, key, default=None):
    return llama_ref._field(reader, key, default)


def write_hf_dir(gguf_path, out):
    r = gguf.GGUFReader(str(gguf_path))
    tok = llama_ref.make_tokenizer(r)  # raises ValueError for tokenizers it does not build
    arch = field(r, "general.architecture")
    tokens = field(r, "tokenizer.ggml.tokens")
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    added = {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                      "single_word": False}
             for i, (t, ty) in enumerate(zip(tokens, field(r, "tokenizer.ggml.token_type")))
             if ty == gguf.TokenType.CONTROL}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": added,
           "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
           "model_max_length": int(field(r, f"{arch}.context_length", 2048))}
    if bos is not None:
        cfg["bos_token"] = tokens[bos]
    if eos is not None:
        cfg["eos_token"] = tokens[eos]
    template = field(r, "tokenizer.chat_template")
    if template:
        cfg["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama" if arch == "llama" else arch, "architectures": ["LlamaForCausalLM"],
        "vocab_size": len(tokens), "bos_token_id": bos, "eos_token_id": eos,
        "max_position_embeddings": cfg["model_max_length"],
        "num_hidden_layers": int(field(r, f"{arch}.block_count")),
        "hidden_size": int(field(r, f"{arch}.embedding_length")),
        "num_attention_heads": int(field(r, f"{arch}.attention.head_count"))}, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", help="the model file agentkv serves")
    ap.add_argument("out", help="directory to write (created)")
    a = ap.parse_args(argv)
    try:
        write_hf_dir(a.gguf, a.out)
    except ValueError as e:
        sys.exit(f"hf_dir: {a.gguf}: {e}")
    print(a.out)


if __name__ == "__main__":
    main()
