# Sourced by the launch scripts (bash): the pieces they share.

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
