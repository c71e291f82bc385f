#!/bin/sh
# A real-network fault for the remote-shard tests: inside a fresh network
# namespace (run as `unshare -r -n sh netns_fault.sh ...`, no root needed),
# nginx serves DOCROOT on 127.0.0.1:PORT and an nftables rule resets every
# connection once the server has sent it more than LIMIT bytes; then
# `wds-shard ls --json URL` reads through the resets.
#
# usage: netns_fault.sh WORKDIR DOCROOT PORT LIMIT WDS_SHARD URL
# Writes WORKDIR/ls.out, WORKDIR/ls.err and nginx's access log WORKDIR/access.log.
set -eu
work=$1 docroot=$2 port=$3 limit=$4 wds_shard=$5 url=$6

ip link set lo up
# Per-connection byte counters, which the rule below reads.
echo 1 > /proc/sys/net/netfilter/nf_conntrack_acct
# The RST goes to the sender of the matched packet: matching the client's
# packets to the server port resets the client's side of the connection.
nft -f - <<EOF
table inet fault {
  chain in {
    type filter hook input priority 0; policy accept;
    tcp dport $port ct reply bytes gt $limit reject with tcp reset
  }
}
EOF

mkdir -p "$work/tmp"
# Root inside the namespace is the caller outside: nginx must not switch to
# "nobody", who is not mapped there.
cat > "$work/nginx.conf" <<EOF
user root root;
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 64; }
http {
  access_log $work/access.log;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fcgi;
  uwsgi_temp_path $work/tmp/uwsgi;
  scgi_temp_path $work/tmp/scgi;
  sendfile on;
  server { listen 127.0.0.1:$port; root $docroot; location / { } }
}
EOF
nginx -p "$work" -c "$work/nginx.conf" -e "$work/error.log" &
nginx_pid=$!
trap 'kill $nginx_pid 2>/dev/null; wait $nginx_pid 2>/dev/null || true' EXIT
i=0
until [ -s "$work/nginx.pid" ] || [ $i -ge 200 ]; do sleep 0.02; i=$((i + 1)); done
sleep 0.1
status=0
"$wds_shard" ls --json "$url" > "$work/ls.out" 2> "$work/ls.err" || status=$?
exit $status
