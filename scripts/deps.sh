#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need.
# Idempotent: when everything is present it returns in a second without apt.
set -euo pipefail

packages=(
  # build
  g++ cmake ninja-build pkg-config
  # wds::core
  libabsl-dev libarchive-dev zlib1g-dev libzstd-dev nlohmann-json3-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libwebp-dev
  # remote shards: libcurl (OpenSSL flavour) and libcrypto for S3 signatures
  libcurl4-openssl-dev libssl-dev
  # wds::torch and the DDP demo
  libtorch-dev libgloo-dev dataset-fashion-mnist python3-torch
  # tests and benchmarks; clang with libFuzzer and the sanitizer runtimes (fuzz/)
  libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev ccache
  # remote-shard tests: a real web server, the S3 mock (node), TLS certificates,
  # and a network namespace whose nftables rules reset connections
  nginx-light nodejs openssl ca-certificates nftables iproute2 util-linux
  # independent tar writers and compressors used by the tests
  tar gzip bzip2 xz-utils zstd python3
  # independent image encoders/decoders for pixel-exact fixtures, plots
  libjpeg-turbo-progs webp python3-numpy python3-pil gnuplot-nox
  # the Python package (python/): headers, pybind11, DLPack, its tests and pip
  python3-dev pybind11-dev libdlpack-dev python3-pytest python3-pip python3-setuptools
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "deps: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
