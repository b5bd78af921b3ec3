# Sourced by the launch scripts (bash): the pieces they share.

# fail MESSAGE...: one line naming the script ($me), exit 2.
fail() {
  echo "$me: error: $*" >&2
  exit 2
}

# TRIDENT_DRY_RUN into the caller's `dry_run`: 0 (run) or 1 (print the command instead). Any
# other value is refused rather than taken for 0 ("true" would otherwise launch the real job).
read_dry_run() {
  dry_run=${TRIDENT_DRY_RUN:-0}
  [[ $dry_run == 0 || $dry_run == 1 ]] || fail "TRIDENT_DRY_RUN must be 0 or 1, got '$dry_run'"
}

# The generation launchers' variables, defaulted: MODEL_NAME, CHECKPOINT_PATH, VOCAB_FILE,
# MERGE_FILE, BUILD_DIR (under the checkout, $repo).
checkpoint_defaults() {
  MODEL_NAME=${MODEL_NAME:-gpt2-345m}
  CHECKPOINT_PATH=${CHECKPOINT_PATH:-$repo/checkpoints/$MODEL_NAME}
  VOCAB_FILE=${VOCAB_FILE:-$repo/data/gpt2/gpt2-vocab.json}
  MERGE_FILE=${MERGE_FILE:-$repo/data/gpt2/gpt2-merges.txt}
  BUILD_DIR=${BUILD_DIR:-$repo/build}
}

# print_command WORD...: the words as one shell command line on stdout, quoting only those
# that need it (TRIDENT_DRY_RUN's output).
print_command() {
  local a
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf ' %s' "$a"; else printf ' %q' "$a"; fi
  done
  printf '\n'
}

# pass_if_set VAR FLAG...: appends FLAG... each followed by $VAR to the caller's `args` when
# VAR is set and not empty.
pass_if_set() {
  local v=$1 f
  shift
  [[ -z ${!v:-} ]] || for f in "$@"; do args+=("$f" "${!v}"); done
}
