#!/usr/bin/env bash
# Builds a small demo JSONL corpus, one {"id": ..., "text": ...} per line, from Debian's
# fortune cookies: English (package `fortunes`) and Chinese (package `fortunes-zh`).
# Installs the packages with apt-get when they are missing (needs root).
#   tools/make-demo-data.sh [OUT_JSONL]      default: ./data/demo/demo.jsonl
set -euo pipefail

out=${1:-./data/demo/demo.jsonl}
dir=/usr/share/games/fortunes

missing=()
[[ -f $dir/fortunes ]] || missing+=(fortunes)
[[ -f $dir/tang300 ]] || missing+=(fortunes-zh)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "make-demo-data.sh: error: packages ${missing[*]} are missing; run as root or apt-get install them" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v perl >/dev/null || { echo "make-demo-data.sh: error: perl is required" >&2; exit 2; }

# Chinese files come from fortunes-zh; every other cookie file in the folder is English.
zh=(chinese tang300 song100)
en=()
for f in "$dir"/*; do
  name=${f##*/}
  [[ -f $f && ! -L $f && $name != *.* ]] || continue
  [[ " ${zh[*]} " == *" $name "* ]] && continue
  en+=("$f")
done
zh_paths=()
for name in "${zh[@]}"; do [[ -f $dir/$name ]] && zh_paths+=("$dir/$name"); done

mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# Entries are separated by lines holding a single %. The perl filter drops terminal colour
# codes (the Chinese files carry some) and writes each entry as one JSON line, escaping
# quotes, backslashes and control characters; UTF-8 bytes pass through unchanged.
perl -e '
  use strict;
  my $n = 0;
  for my $path (@ARGV) {
    open(my $fh, "<:raw", $path) or die "make-demo-data.sh: error: cannot read $path\n";
    local $/ = undef;
    my $all = <$fh>;
    close $fh;
    (my $name = $path) =~ s{.*/}{};
    my $k = 0;
    for my $entry (split /^%\r?\n/m, $all) {
      $entry =~ s/\e\[[0-9;]*[A-Za-z]//g;
      $entry =~ s/\s+\z//;
      $entry =~ s/\A\n+//;
      next if $entry eq "";
      $entry =~ s/\\/\\\\/g;
      $entry =~ s/"/\\"/g;
      $entry =~ s/\n/\\n/g;
      $entry =~ s/\t/\\t/g;
      $entry =~ s/([\x00-\x1f\x7f])/sprintf("\\u%04x", ord($1))/ge;
      printf "{\"id\": \"%s-%d\", \"text\": \"%s\"}\n", $name, $k++, $entry;
      $n++;
    }
  }
  print STDERR "make-demo-data.sh: $n documents\n";
' "${en[@]}" "${zh_paths[@]}" > "$tmp"
chmod "$(printf '%o' $((0666 & ~0$(umask))))" "$tmp"  # mktemp makes it 0600: an ordinary file's mode
mv -f "$tmp" "$out"
trap - EXIT
echo "make-demo-data.sh: wrote $out ($(wc -c < "$out") bytes)" >&2
