#!/usr/bin/env bash
# Installs the Debian packages trident builds and runs with (idempotent; root or sudo).
# Only missing packages are installed, so a second run costs a few dpkg queries.
# --tests also installs what only the test suite uses (tests/run.sh passes it).
set -euo pipefail
packages=(
  cmake g++ make pkg-config git xz-utils
  libopenmpi-dev openmpi-bin          # MPI launcher and library
  libyaml-cpp-dev libcxxopts-dev      # --config YAML, command-line flags
  libgtest-dev                        # tests
  libopenblas-openmp-dev              # CPU GEMM, on the CPU backend's OpenMP threads
  libsimdjson-dev nlohmann-json3-dev  # JSONL corpora, vocab.json
  libutf8proc-dev liblzma-dev         # Unicode classes for BPE, .jsonl.xz input
  libprotobuf-dev protobuf-compiler   # TensorBoard event records
  libxxhash-dev                       # checkpoint checksums
  libzip-dev                          # Megatron checkpoints (torch.save's zip archives)
  libcpp-httplib-dev                  # trident-text-generation-server's HTTP
  fortunes fortunes-zh                # the demo corpus
  curl ca-certificates                # get-gpt2-vocab.sh's download (minimal images have neither)
)
if [[ ${1:-} == --tests ]]; then
  packages+=(python3-torch python3-numpy)  # the PyTorch GPT-2 of tests/e2e/pytorch_reference.sh
elif [[ $# -gt 0 ]]; then
  echo "install-deps: unknown argument $1 (only --tests)" >&2
  exit 2
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "install-deps: error: missing packages (${missing[*]}) and not root, without sudo: run as root" >&2
      exit 2
    fi
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  # (a mirror's passing failure is retried rather than failing a fresh machine's setup)
  $sudo apt-get -o Acquire::Retries=3 update -qq
  $sudo apt-get -o Acquire::Retries=3 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
