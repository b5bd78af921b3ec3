#!/usr/bin/env bash
# check-cuda-spills.sh: fail when any kernel in kernels/cuda spills registers.
#
# A spill is only visible in ptxas's own report (the cubin keeps the stack size, not the
# spill count, and cuobjdump is not part of every toolkit install). This reads that report
# for the device code of every kernels/cuda/*.cu and every architecture, prints one line
# per kernel
#   arch  file  kernel  registers  stack-frame  spill-stores  spill-loads  instrs
# and exits 1 when any kernel has a non-zero spill store or load (2 on a usage or compile
# error, or a missing report). Functions ptxas compiled on their own (__noinline__) are
# rows too: a spill there is the calling kernel's. A stack frame without spills (e.g. a
# dynamically indexed local array) is shown but does not fail the check, and neither do
# ptxas's advisories (e.g. "(C7515) ... wgmma ... serialized"), listed after the table.
# The reports come from one of:
# - --reports DIR: the build's own compile. trident_cuda compiles through
#   tools/nvcc-ptxas-report.sh, which keeps each object's report as DIR/<file>.o.ptxas
#   (DIR is <build>/ptxas-reports). Every file must have one, and every architecture of
#   --arch some kernels. This is the ctest test `cuda_register_spills`
#   (tests/cuda/CMakeLists.txt): no second compile of the kernels.
# - otherwise a compile of its own: the device code only (nvcc -cubin, no host compile, no
#   link), once per architecture, with the build's flags plus -Xptxas -v. Only this mode
#   fills the last column, instrs: the kernel's static SASS instruction count (its .text
#   section over 16 bytes, read with readelf; "?" without it). With unrolled inner loops
#   it tracks the issue slots a change saves, where no GPU (and no disassembler: the
#   toolkit here ships none) can say more.
#
# Usage: tools/check-cuda-spills.sh [--nvcc PATH] [--arch "80;90a"] [-j N] [--reports DIR]
#                                   [file.cu ...]
#   Without files it checks kernels/cuda/*.cu of this checkout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvcc="${NVCC:-}"
archs="80;90a"
jobs=2
reports=""
files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nvcc) nvcc="$2"; shift 2 ;;
    --arch) archs="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    --reports) reports="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "check-cuda-spills: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
if [[ -z "$nvcc" ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; else nvcc="$(command -v nvcc || true)"; fi
fi
if [[ -z "$reports" && ( -z "$nvcc" || ! -x "$nvcc" ) ]]; then
  echo "check-cuda-spills: nvcc not found (use --nvcc PATH)" >&2
  exit 2
fi
if [[ ${#files[@]} -eq 0 ]]; then
  files=("$root"/kernels/cuda/*.cu)
fi

# "80;90", "80 90", "90a", "80-real" -> 80 90 90a 80; "native"/"all" fall back to 80 90a.
arch_list=()
for a in ${archs//;/ }; do
  a="${a%-real}"; a="${a%-virtual}"
  case "$a" in
    native|all|all-major) arch_list+=(80 90a) ;;
    *) arch_list+=("$a") ;;
  esac
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One job per report: "<id> <file> <arch or -> <log>", the log holding ptxas -v's output.
jobfile="$work/jobs"
: > "$jobfile"
if [[ -n "$reports" ]]; then
  n=0
  for f in "${files[@]}"; do
    log="$reports/$(basename "$f").o.ptxas"
    if [[ ! -f "$log" ]]; then
      echo "check-cuda-spills: no ptxas report $log for $f: build trident_cuda (its compiles write them;" \
        "after deleting reports, touch kernels/cuda/*.cu or build clean)" >&2
      exit 2
    fi
    : > "$work/$n.sections"
    printf '%s\t%s\t%s\t%s\n' "$n" "$f" - "$log" >> "$jobfile"
    n=$((n + 1))
  done
  # "native"/"all": the build's architectures are the reports' own.
  if [[ " ${archs//;/ } " =~ \ (native|all|all-major)\  ]]; then
    mapfile -t arch_list < <(cut -f4 "$jobfile" | xargs -d '\n' grep -h -o "for 'sm_[0-9a-z]*'" | sed "s/for 'sm_//; s/'//" | sort -u)
  fi
  # Some files have no kernels; every architecture must have some somewhere.
  for a in "${arch_list[@]}"; do
    if ! cut -f4 "$jobfile" | xargs -d '\n' grep -q "for 'sm_$a'"; then
      echo "check-cuda-spills: no kernels for sm_$a in the reports (was the build configured for other architectures?)" >&2
      exit 2
    fi
  done
else
  # A device-only compile per (file, arch) with ptxas's report.
  n=0
  for f in "${files[@]}"; do
    for a in "${arch_list[@]}"; do
      printf '%s\t%s\t%s\t%s\n' "$n" "$f" "$a" "$work/$n.log" >> "$jobfile"
      n=$((n + 1))
    done
  done
  export nvcc root work
  compile_one() {
    local id="$1" f="$2" a="$3"
    if ! "$nvcc" -cubin -O3 -DNDEBUG -std=c++17 -arch="sm_$a" -I"$root" -I"$root/csrc" -Xptxas -v \
         -o "$work/$id.cubin" "$f" > "$work/$id.log" 2>&1; then
      echo "check-cuda-spills: compile failed: $f (sm_$a)" >&2
      cat "$work/$id.log" >&2
      return 1
    fi
    # "<mangled kernel> <.text bytes>" per kernel (empty without readelf)
    : > "$work/$id.sections"
    if command -v readelf > /dev/null; then
      readelf -SW "$work/$id.cubin" 2> /dev/null |
        sed -n 's/^ *\[ *[0-9]*\] *\.text\.\([^ ]*\) *[A-Z_]* *[0-9a-f]* *[0-9a-f]* *\([0-9a-f]*\) .*/\1 \2/p' |
        while read -r fn hex; do echo "$fn $((16#$hex))"; done > "$work/$id.sections"
    fi
  }
  export -f compile_one
  if ! cut -f1-3 "$jobfile" | tr '\t' '\n' | xargs -d '\n' -n 3 -P "$jobs" bash -c 'compile_one "$@"' _; then
    exit 2
  fi
fi

demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }

# ptxas -v, per function and architecture (one report may hold several):
#   ptxas info    : Compiling entry function '<mangled>' for 'sm_90a'
#   ptxas info    : Function properties for <mangled>
#       16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 96 registers, used 1 barriers, ...
table="$work/table"
: > "$table"
while IFS=$'\t' read -r id f _ log; do
  awk -v file="$(basename "$f")" '
    FILENAME == sizes { text[$1] = $2; next }
    /Compiling entry function/ {
      match($0, /function .[^'"'"']*/); fn = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /for .sm_[0-9a-z]+/); arch = substr($0, RSTART + 5, RLENGTH - 5)
      entry[arch SUBSEP fn] = 1; next }
    /Function properties for/ { cur = arch SUBSEP $NF; entry[cur] = 1; next }  # also non-entry (noinline) functions
    /bytes stack frame/ { stack[cur] = $1; st[cur] = $5; ld[cur] = $9; next }
    /Used [0-9]+ registers/ {
      match($0, /Used [0-9]+ registers/); regs[cur] = substr($0, RSTART + 5, RLENGTH - 15); next }
    END {
      for (k in entry) {
        split(k, part, SUBSEP)
        n = part[2] in text ? sprintf("%d", text[part[2]] / 16) : "?"
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", part[1], file, part[2], (k in regs ? regs[k] : "?"),
               (k in stack ? stack[k] : 0), (k in st ? st[k] : 0), (k in ld ? ld[k] : 0), n
      }
    }' sizes="$work/$id.sections" "$work/$id.sections" "$log" >> "$table"
done < "$jobfile"

if [[ ! -s "$table" ]]; then
  echo "check-cuda-spills: no kernels found in ptxas output" >&2
  exit 2
fi

# Readable kernel names: demangled, namespaces and parameter lists dropped.
cut -f3 "$table" | demangle | sed -e 's/trident::cuda::(anonymous namespace):://g' -e 's/trident::cuda:://g' \
  -e 's/(.*$//' -e 's/^void //' > "$work/names"
paste "$table" "$work/names" | sort -t$'\t' -k2,2 -k9,9 -k1,1 > "$work/sorted"

bad=0
printf '%-6s %-22s %-58s %5s %6s %7s %7s %7s\n' arch file kernel regs stack spill-st spill-ld instrs
while IFS=$'\t' read -r arch file _ regs stack sst sld instrs name; do
  flag=""
  if [[ "$sst" != 0 || "$sld" != 0 ]]; then flag="  <-- SPILLS"; bad=$((bad + 1)); fi
  printf '%-6s %-22s %-58s %5s %6s %7s %7s %7s%s\n' "$arch" "$file" "${name:0:58}" "$regs" "$stack" "$sst" "$sld" \
    "$instrs" "$flag"
done < "$work/sorted"
# ptxas's advisories (it prints them without -v too), once each.
cut -f4 "$jobfile" | xargs -d '\n' grep -h -E '\(C[0-9]{4}\)' | sort -u | sed 's/^/ptxas advisory: /' || true
total=$(wc -l < "$work/sorted")
if [[ $bad -ne 0 ]]; then
  echo "check-cuda-spills: FAIL: $bad of $total kernel builds spill registers (fix the kernel or its __launch_bounds__)"
  exit 1
fi
echo "check-cuda-spills: OK: $total kernel builds, none spills"
