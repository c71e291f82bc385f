#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need,
# and the npm packages of the S3 tests (tests/s3: s3rver and AWS's JavaScript
# client, versions pinned by tests/s3/package-lock.json, into its git-ignored
# node_modules). Idempotent: when everything is present it returns in a
# second without apt or npm.
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
  # remote-shard tests: a real web server, node for the S3 server (tests/s3),
  # TLS certificates, and a network namespace whose nftables rules reset
  # connections
  nginx-light nodejs openssl ca-certificates nftables iproute2 util-linux
  # independent tar writers and compressors used by the tests
  tar gzip bzip2 xz-utils zstd python3
  # independent image encoders/decoders for pixel-exact fixtures, plots
  libjpeg-turbo-progs webp python3-numpy python3-pil gnuplot-nox
  # the Python package (python/): headers, pybind11, DLPack, its tests and pip
  python3-dev pybind11-dev libdlpack-dev python3-pytest python3-pip python3-setuptools
  # .mp/.msg fields (the writer's and the decoder's msgpack), checked by the tests;
  # LMDBCached's database
  python3-msgpack python3-lmdb
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
# Debian ships npm apart from nodejs; some nodejs builds bundle it.
command -v npm >/dev/null 2>&1 || missing+=(npm)

sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
if ((${#missing[@]} > 0)); then
  echo "deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# tests/s3's node_modules, installed exactly as locked; the lock's hash kept
# inside tells a current install from a stale one.
s3_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/s3"
lock_hash=$(sha256sum "$s3_dir/package-lock.json" | cut -d' ' -f1)
stamp="$s3_dir/node_modules/.wds-lock-sha256"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_hash" ]]; then
  echo "deps: npm ci in tests/s3" >&2
  (cd "$s3_dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$lock_hash" >"$stamp"
fi
