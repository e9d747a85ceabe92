#!/bin/bash
# `gregor perf` against the confluent-kafka baseline (confluent_perf.py beside this), alternated,
# one run each at a time, against one release `gregor dev` on a loopback port. Used for the
# "gregor perf" table in BENCHMARKS.md; take medians of the printed runs. It also measures this
# machine's limits in the same run, three times each, between the loads: one loopback TCP
# connection's throughput (limits.py) and sequential 1 MiB writes + fdatasync to the data
# directory's file system (dd), so the table can state `gregor perf` as a share of them.
#
# usage: CARGO_TARGET_DIR=... GREGOR_PYTHON=... bash realnet/benches/perf_vs_confluent.sh [PORT]
set -u
G="${CARGO_TARGET_DIR:?}/release/gregor"
PY="${GREGOR_PYTHON:?a Python with confluent-kafka (see .ci/run)}"
B="$(dirname "$0")/confluent_perf.py"
port="${1:-21997}"
addr="127.0.0.1:$port"
data="$(mktemp -d)"
"$G" dev --listen "$addr" --data-dir "$data/d" >"$data/dev.log" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev; rm -rf "$data"' EXIT
sleep 1
limits() {
  timeout 120 "$PY" "$(dirname "$0")/limits.py" tcp 2048 | sed "s/^/limit /"
  dd if=/dev/zero of="$data/dd" bs=1M count=1024 conv=fdatasync 2>&1 | tail -1 | sed "s/^/limit disk: /"
  rm -f "$data/dd"
}
limits
for cfg in "100 1 100000" "100 all 100000" "1024 1 30000" "1024 all 30000"; do
  set -- $cfg; size=$1; acks=$2; n=$3
  for r in 1 2 3; do
    timeout 120 "$G" perf produce --bootstrap-server "$addr" --topic "g-$size-$acks" --num-records "$n" \
      --record-size "$size" --acks "$acks" --runs 1 --batch-records 500 | grep '^run' | sed "s/^/gregor $size B acks=$acks: /"
    timeout 120 "$PY" "$B" "$addr" "c-$size-$acks-$r" "$n" "$size" "$acks" | sed "s/^/$size B acks=$acks: /"
  done
  limits
done
for r in 1 2 3; do
  timeout 120 "$G" perf consume --bootstrap-server "$addr" --topic "gc-$r" --num-records 100000 --record-size 100 \
    --runs 1 | grep '^run' | sed "s/^/gregor consume 100 B: /"
  timeout 120 "$PY" "$B" "$addr" "cc-$r" 100000 100 1 consume | grep consume | sed "s/^/100 B: /"
done
