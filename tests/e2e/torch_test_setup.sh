# Sourced by the e2e tests whose references are written with PyTorch (megatron_import.sh,
# megatron_resume.sh): sets py to Debian's python3, exits 77 (ctest: skipped) when it cannot
# import torch and numpy, and gives a scratch folder $tmp (removed at exit) and the ok/fail
# reporters counting $fails.
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $py cannot import torch and numpy (tools/install-deps.sh --tests installs them)"
  exit 77  # ctest: skipped (SKIP_RETURN_CODE)
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok $*"; }
