#!/usr/bin/env bash
# Remote shards against local files, side by side in one run (issue 12):
# serves DIR's shards with nginx on 127.0.0.1 (http, and https with HTTP/2)
# and with s3rver (tests/s3/s3.js: every request's SigV4 signature checked;
# scripts/deps.sh installs it), then reads them
# with one thread through build/bench/remote_read_bench (file, http, https,
# s3, a cold then warm cache, and the raw ceilings: read(2) of the files and
# a plain socket GET) and with wds-bench (--workers 1) on file, http and s3
# URLs.
#
# usage: bench/remote_bench.sh [DIR] [PATTERN]
#   DIR defaults to /work/data/imagenet, PATTERN to imagenet-{000000..000007}.tar
#   (bench/make_imagenet_like.sh makes such a set). Env: WDS_BUILD_DIR (build),
#   ROUNDS (3), WDS_BENCH_DECODE (rgb8: wds-bench's decoding run), S3 (1; 0 leaves
#   out the S3 server, whose start uploads the whole set through the SDK).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${WDS_BUILD_DIR:-build}
dir=$(realpath "${1:-/work/data/imagenet}")
pattern=${2:-imagenet-{000000..000007\}.tar}
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/wds-remote-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# nginx: http + https (HTTP/2), a self-signed certificate for 127.0.0.1.
mkdir -p "$work/nginx/tmp"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$work/nginx/key.pem" -out "$work/nginx/cert.pem" 2>/dev/null
hp=$(free_port)
sp=$(free_port)
user=""
[[ $(id -u) == 0 ]] && user="user root root;"
cat > "$work/nginx/nginx.conf" <<EOF
$user
daemon off; master_process off; worker_processes 1; pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 64; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 10000;
  client_body_temp_path $work/nginx/tmp/b; proxy_temp_path $work/nginx/tmp/p;
  fastcgi_temp_path $work/nginx/tmp/f; uwsgi_temp_path $work/nginx/tmp/u; scgi_temp_path $work/nginx/tmp/s;
  server {
    listen 127.0.0.1:$hp; listen 127.0.0.1:$sp ssl http2;
    ssl_certificate $work/nginx/cert.pem; ssl_certificate_key $work/nginx/key.pem;
    root $dir; location / { }
  }
}
EOF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!)
wait_port "$hp" && wait_port "$sp" || { cat "$work/nginx/error.log"; exit 1; }

s3_modes=()
s3_urls=()
if [[ ${S3:-1} != 0 ]]; then
  # s3rver: bucket "data" holds DIR's shards (uploaded with AWS's client, which
  # takes a while for a large set).
  mkdir -p "$work/s3"
  ln -s "$dir" "$work/s3/data"
  node --no-warnings "$root/tests/s3/s3.js" serve --root "$work/s3" --port-file "$work/s3/port" \
    --access-key AKIDBENCH --secret-key benchsecret > "$work/s3.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1200); do [[ -s $work/s3/port ]] && break; sleep 0.1; done
  [[ -s $work/s3/port ]] || { cat "$work/s3.log"; exit 1; }
  s3port=$(cat "$work/s3/port")
  export AWS_ENDPOINT_URL=http://127.0.0.1:$s3port AWS_ACCESS_KEY_ID=AKIDBENCH \
    AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
  s3_modes=("s3=s3://data/$pattern")
  s3_urls=("s3://data/$pattern")
fi
export CURL_CA_BUNDLE=$work/nginx/cert.pem

# Page cache warm for every mode alike.
eval "cat $dir/$pattern" > /dev/null

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $dir/$pattern"
echo "== one reading thread, rounds interleaved ($rounds)"
"$build/bench/remote_read_bench" --rounds "$rounds" \
  "bytes=$dir/$pattern" "tcp=127.0.0.1:$hp/$pattern" "file=$dir/$pattern" \
  "http=http://127.0.0.1:$hp/$pattern" "https=https://127.0.0.1:$sp/$pattern" \
  "${s3_modes[@]}" "cache=http://127.0.0.1:$hp/$pattern"

decode=${WDS_BENCH_DECODE:-rgb8}
echo "== wds-bench --workers 1 (raw, then --decode $decode --resize 224x224 --crop center)"
for url in "$dir/$pattern" "http://127.0.0.1:$hp/$pattern" "${s3_urls[@]}"; do
  echo "-- $url"
  "$build/tools/wds-bench" --workers 1 --batch 64 --decode none --json "$url" |
    grep -o '"samples_per_s": [0-9.]*\|"mb_per_s": [0-9.]*' | paste -sd' ' || true
  "$build/tools/wds-bench" --workers 1 --batch 64 --decode "$decode" --resize 224x224 \
    --crop center --json "$url" | grep -o '"samples_per_s": [0-9.]*' || true
done
