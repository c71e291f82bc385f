#!/usr/bin/env bash
# Packs the Debian headers and libraries that building webdataset-cpp needs
# and the GPU machines (Ubuntu 24.04, offline) lack into one tarball, for
# scripts/gpu_check.sh:
#
#   scripts/gpu_bundle.sh [OUT]    (default: build-bundle/wds-gpu-bundle.tar.xz, git-ignored)
#
# The tarball is a sysroot: usr/include, usr/lib/x86_64-linux-gnu (the
# libraries, their .so links, CMake and pkg-config files), usr/share/{cmake,
# pkgconfig}, plus bin/ninja and bin/pkg-config (pkgconf) and MANIFEST (the
# packages and versions). Shared-library dependencies outside glibc and the
# C++ runtime come along, found with ldd. Run on a dev machine after
# scripts/deps.sh. Checks before it packs: every bundled library's
# dependencies resolve inside the bundle or the base system's glibc/libstdc++,
# CMake configures the project finding every package in the bundle alone
# (CMAKE_FIND_ROOT_PATH ... ONLY), and the tarball is at most 60 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-bundle/wds-gpu-bundle.tar.xz}
max_bytes=$((60 * 1000 * 1000))
multiarch=x86_64-linux-gnu

# Headers and link-time files of these; their runtime libraries follow.
dev_packages=(
  libabsl-dev libarchive-dev zlib1g-dev libzstd-dev nlohmann-json3-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libwebp-dev
  libcurl4-openssl-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdlpack-dev libgloo-dev
)
# Left to the target system: glibc and the GCC runtime (Ubuntu 24.04's are newer).
system_libs='^(linux-vdso|libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|libresolv|libutil)\.so'

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/bin" "$root/usr/lib/$multiarch"

copy_path() {  # copy_path /usr/...: file or symlink, keeping its place
  local path=$1
  mkdir -p "$root$(dirname "$path")"
  cp -a "$path" "$root$path"
}

echo "gpu_bundle: collecting ${#dev_packages[@]} packages" >&2
: >"$stage/manifest"
for p in "${dev_packages[@]}"; do
  dpkg-query -W -f='${Package} ${Version}\n' "$p" >>"$stage/manifest"
  while read -r f; do
    [[ -f $f || -L $f ]] || continue
    case $f in
      /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/src/*) continue ;;
      # Static archives only where no shared library exists (gtest, gmock, benchmark_main).
      *.a) [[ -e ${f%.a}.so ]] && continue ;;
    esac
    copy_path "$f"
  done < <(dpkg -L "$p")
done
# libgloo-dev: its headers only (wds::torch compiles against them; libgloo
# itself comes inside LibTorch).
rm -f "$root/usr/lib/$multiarch"/libgloo*

# Runtime libraries behind the .so links, then their dependencies.
libdir=$root/usr/lib/$multiarch
for link in "$libdir"/*.so; do
  [[ -L $link ]] || continue
  real=$(readlink -f "/usr/lib/$multiarch/$(basename "$link")")
  [[ -e $real ]] && cp -an "$real" "$libdir/"
  soname=$(objdump -p "$real" 2>/dev/null | awk '/SONAME/ {print $2}')
  [[ -n $soname && ! -e $libdir/$soname ]] && ln -s "$(basename "$real")" "$libdir/$soname"
done
for round in 1 2 3 4; do
  added=0
  for lib in "$libdir"/*.so*; do
    [[ -f $lib && ! -L $lib ]] || continue
    while read -r name path; do
      [[ $name =~ $system_libs ]] && continue
      [[ -e $libdir/$name ]] && continue
      cp -L "$path" "$libdir/$name"
      added=$((added + 1))
    done < <(ldd "$lib" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  done
  ((added == 0)) && break
done
# Dependencies copied by soname are not links: strip them for size.
strip --strip-unneeded "$libdir"/*.so.* 2>/dev/null || true

cp -L /usr/bin/ninja "$root/bin/ninja"
cp -L /usr/bin/pkgconf "$root/bin/pkg-config"
cp -L "$(readlink -f /usr/lib/$multiarch/libpkgconf.so.3)" "$libdir/libpkgconf.so.3"
{
  echo "webdataset-cpp GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  cat "$stage/manifest"
  echo "ninja-build $(dpkg-query -W -f='${Version}' ninja-build)"
  echo "pkgconf $(dpkg-query -W -f='${Version}' pkgconf)"
} >"$root/MANIFEST"

echo "gpu_bundle: checking that every dependency resolves in the bundle" >&2
missing=""
for lib in "$libdir"/*.so.* "$root/bin/ninja" "$root/bin/pkg-config"; do
  [[ -f $lib && ! -L $lib ]] || continue
  while read -r name arrow path _; do
    [[ $arrow == "=>" && ! $name =~ $system_libs ]] || continue
    [[ $path == "$libdir"/* ]] || missing+="$lib: $name $path"$'\n'
  done < <(LD_LIBRARY_PATH=$libdir ldd "$lib" 2>/dev/null)
done
if [[ -n $missing ]]; then
  echo "gpu_bundle: dependencies outside the bundle:" >&2
  echo "$missing" >&2
  exit 1
fi

echo "gpu_bundle: configuring the project against the bundle alone" >&2
check_build=$stage/configure
if ! PKG_CONFIG="$root/bin/pkg-config" PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$root/usr/share/pkgconfig" \
  PKG_CONFIG_SYSROOT_DIR="$root" LD_LIBRARY_PATH="$libdir" \
  cmake -S . -B "$check_build" -G Ninja -DCMAKE_MAKE_PROGRAM="$root/bin/ninja" \
  -DCMAKE_FIND_ROOT_PATH="$root" -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY \
  -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
  -DWDS_WITH_TORCH=OFF -DWDS_WITH_CUDA=OFF -DWDS_BUILD_PYTHON=OFF >"$stage/configure.log" 2>&1; then
  tail -30 "$stage/configure.log" >&2
  echo "gpu_bundle: the project does not configure against the bundle alone" >&2
  exit 1
fi
outside=$(grep -E '^[A-Za-z_0-9]+(_LIBRARY|_INCLUDE_DIR|_DIR|_LIBRARY_RELEASE|_INCLUDE_DIRS):(FILEPATH|PATH)=/' \
  "$check_build/CMakeCache.txt" | grep -v "=$root" | grep -Ev 'NOTFOUND|CMAKE_|=/usr/local/cuda' || true)
if [[ -n $outside ]]; then
  echo "gpu_bundle: found outside the bundle:" >&2
  echo "$outside" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tar -C "$root" -cf - . | xz -9 -T2 >"$out.tmp"
mv "$out.tmp" "$out"
bytes=$(stat -c %s "$out")
echo "gpu_bundle: $out: $bytes bytes, $(find "$root" -type f | wc -l) files" >&2
if ((bytes > max_bytes)); then
  echo "gpu_bundle: $out is over $max_bytes bytes" >&2
  exit 1
fi
