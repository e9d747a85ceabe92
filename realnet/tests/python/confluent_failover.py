"""Produces with confluent-kafka (acks=all, idempotent) to a replicated gregor cluster while the
Rust test kills the partition leader with SIGKILL and restarts it, then reads every partition
back and checks: every acknowledged message is in the log, none twice.

Usage: confluent_failover.py BOOTSTRAP TOPIC N BUDGET_S READY_FILE GO_FILE
Prints `acked-start` to READY_FILE's path once a first message is acknowledged (the test then
kills the leader), keeps producing until N are acknowledged or BUDGET_S passes, and prints one
`compared ...` line.
"""

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic, n, budget_s, ready_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
deadline = time.monotonic() + budget_s

acked, failed = set(), []


def on_delivery(err, msg):
    if err is None:
        acked.add(msg.value())
    else:
        failed.append(str(err))


producer = Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": int(budget_s * 1000 * 0.6),
})
told = False
for i in range(n):
    value = b"m%06d" % i
    while True:
        try:
            producer.produce(topic, value=value, key=b"k%d" % (i % 16), on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)
    if not told and acked:
        with open(ready_file, "w") as f:
            f.write("acked-start\n")
        told = True
    time.sleep(0.003)
    if time.monotonic() > deadline:
        break
producer.flush(max(1.0, deadline - time.monotonic()))

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-check", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
# A broker just restarted answers Metadata before it has read the cluster state (LEADER_NOT_AVAILABLE
# and no partitions, as a Kafka broker with an empty metadata cache does): ask until the topic's
# partitions are listed, or the read below would assign nothing.
parts = []
meta_deadline = time.monotonic() + 30
while not parts and time.monotonic() < meta_deadline:
    meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if meta is not None and meta.error is None:
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
    if not parts:
        print("metadata for %s: %s" % (topic, meta and meta.error), file=sys.stderr)
        time.sleep(0.5)
if not parts:
    print("FAIL: no partitions of %s listed in 30 s" % topic, file=sys.stderr)
    sys.exit(1)
consumer.assign(parts)
seen = {}
errors = {}  # consumer errors by text, so a read that stalls says why


def note_error(msg):
    if msg is not None and msg.error():
        text = str(msg.error())
        errors[text] = errors.get(text, 0) + 1


read_deadline = time.monotonic() + 30
while time.monotonic() < read_deadline and not acked.issubset(seen.keys()):
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        note_error(msg)
        continue
    seen[msg.value()] = seen.get(msg.value(), 0) + 1
# Read on until quiet, so duplicates after the last acked message are seen too.
quiet = 0
while quiet < 4 and time.monotonic() < read_deadline + 10:
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        note_error(msg)
        quiet += 1
        continue
    quiet = 0
    seen[msg.value()] = seen.get(msg.value(), 0) + 1
if not acked.issubset(seen.keys()):
    # Say where the read stood, so a stalled read can be told from a short log.
    for tp in consumer.position(parts):
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=5)
        except Exception as e:  # noqa: BLE001 - a diagnostic only
            low, high = "?", "? (%s)" % e
        print("partition %d: position %s, log %s..%s" % (tp.partition, tp.offset, low, high), file=sys.stderr)
consumer.close()

lost = sorted(acked - seen.keys())
if errors:
    print("consumer errors: %s" % sorted(errors.items(), key=lambda e: -e[1])[:5], file=sys.stderr)
twice = sorted(v for v, c in seen.items() if c > 1)
print(f"produced {n}, acked {len(acked)}, failed {len(failed)} ({failed[:3]}), read {len(seen)} distinct")
if not acked:
    print("FAIL: nothing was acknowledged", file=sys.stderr)
    sys.exit(1)
if lost:
    print(f"FAIL: {len(lost)} acknowledged messages lost, first {lost[:5]}", file=sys.stderr)
    sys.exit(1)
if twice:
    print(f"FAIL: {len(twice)} messages twice in the log, first {twice[:5]}", file=sys.stderr)
    sys.exit(1)
print(f"compared {len(acked)} acknowledged messages: all in the log, none twice")
