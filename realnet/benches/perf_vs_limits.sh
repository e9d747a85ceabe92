#!/bin/bash
# `gregor perf produce` (batching producer, linger.ms 5) on one release `gregor dev`, next to this
# machine's limits measured in the same run: one loopback TCP connection's throughput
# (limits.py) and sequential 1 MiB writes + fdatasync (dd) on the data directory's file system.
# Loads and limits alternate, three rounds; the BENCHMARKS.md table takes medians and states the
# broker's MB/s as a share of each limit.
#
# usage: CARGO_TARGET_DIR=... bash realnet/benches/perf_vs_limits.sh [PORT]
set -u
G="${CARGO_TARGET_DIR:?}/release/gregor"
PY="${GREGOR_PYTHON:-python3}"
port="${1:-21998}"
addr="127.0.0.1:$port"
data="$(mktemp -d)"
"$G" dev --listen "$addr" --data-dir "$data/d" >"$data/dev.log" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev; rm -rf "$data"' EXIT
sleep 1
for round in 1 2 3; do
  timeout 120 "$PY" "$(dirname "$0")/limits.py" tcp 2048 | sed "s/^/round $round limit /"
  dd if=/dev/zero of="$data/dd" bs=1M count=1024 conv=fdatasync 2>&1 | tail -1 | sed "s/^/round $round limit disk: /"
  rm -f "$data/dd"
  for cfg in "100 1 300000" "100 all 300000" "1024 1 100000" "1024 all 100000"; do
    set -- $cfg; size=$1; acks=$2; n=$3
    timeout 120 "$G" perf produce --bootstrap-server "$addr" --topic "p-$size-$acks-$round" --num-records "$n" \
      --record-size "$size" --acks "$acks" --runs 1 --linger-ms 5 2>/dev/null | grep '^run' \
      | sed "s/^/round $round gregor $size B acks=$acks linger 5: /"
  done
done
