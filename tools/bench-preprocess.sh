#!/usr/bin/env bash
# Measures trident-preprocess throughput (MB/s of JSONL text) with --workers 1 and 2 on a
# >= 100 MB corpus made by repeating the demo corpus with fresh ids.
#   tools/bench-preprocess.sh
# Environment: TRIDENT_PREPROCESS (the binary; default: build*/tools/trident-preprocess),
# BENCH_DIR (scratch folder, default ./data/bench), BENCH_MB (corpus size, default 100),
# BENCH_WORKERS (default "1 2").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "bench-preprocess.sh: $*" >&2; }

bin=${TRIDENT_PREPROCESS:-}
if [[ -z $bin ]]; then
  for c in "$repo"/build/tools/trident-preprocess "$repo"/build*/tools/trident-preprocess; do
    [[ -x $c ]] && { bin=$c; break; }
  done
fi
[[ -n $bin && -x $bin ]] || { say "error: trident-preprocess not found; build it or set TRIDENT_PREPROCESS"; exit 2; }

dir=${BENCH_DIR:-./data/bench}
mb=${BENCH_MB:-100}
mkdir -p "$dir"
"$repo/tools/get-gpt2-vocab.sh" "$dir/gpt2"
demo=$dir/demo.jsonl
[[ -s $demo ]] || "$repo/tools/make-demo-data.sh" "$demo"

corpus=$dir/bench-${mb}mb.jsonl
want=$((mb * 1000 * 1000))
if [[ ! -s $corpus || $(wc -c < "$corpus") -lt $want ]]; then
  tmp=$corpus.tmp.$$
  : > "$tmp"
  rep=0
  while (($(wc -c < "$tmp") < want)); do
    # {"id": "art-0", ...} -> {"id": "r3-art-0", ...}: every line stays valid JSON
    sed "s/^{\"id\": \"/{\"id\": \"r$rep-/" "$demo" >> "$tmp"
    rep=$((rep + 1))
  done
  mv -f "$tmp" "$corpus"
fi
bytes=$(wc -c < "$corpus")
say "corpus $corpus: $bytes bytes, $(wc -l < "$corpus") documents; binary $bin; $(nproc) CPUs"

for w in ${BENCH_WORKERS:-1 2}; do
  start=$(date +%s.%N)
  "$bin" --input "$corpus" --output-prefix "$dir/out-w$w" --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$dir/gpt2/gpt2-vocab.json" --merge-file "$dir/gpt2/gpt2-merges.txt" --append-eod \
    --workers "$w" --log-interval 200000 2> "$dir/log-w$w.txt"
  end=$(date +%s.%N)
  tool=$(grep -o '([0-9.]* MB/s' "$dir/log-w$w.txt" | tail -n 1 | tr -d '(')
  awk -v b="$bytes" -v s="$start" -v e="$end" -v w="$w" -v t="$tool" \
    'BEGIN { printf "workers %s: %.1f MB/s wall (%.1f MB in %.1f s; tool reports %s)\n", w, b / 1e6 / (e - s), b / 1e6, e - s, t }'
done
if cmp -s "$dir/out-w1_text_document.bin" "$dir/out-w2_text_document.bin" &&
  cmp -s "$dir/out-w1_text_document.idx" "$dir/out-w2_text_document.idx"; then
  say "outputs of 1 and 2 workers are identical"
fi
