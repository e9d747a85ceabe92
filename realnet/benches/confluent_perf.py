"""Baseline for `gregor perf`: confluent-kafka (librdkafka) against the same broker.

Produces N records of SIZE bytes with the given acks to TOPIC (as fast as librdkafka batches
them: linger.ms=5, its default), waits for every delivery report, and prints one line with
records/s and MB/s; with `consume` it then reads N records back from the beginning (no group)
and prints the same for the read. Bounded: each phase stops at TIMEOUT seconds.

usage: confluent_perf.py BOOTSTRAP TOPIC N SIZE ACKS [consume]
"""

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def main():
    bootstrap, topic, n, size, acks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    consume = len(sys.argv) > 6 and sys.argv[6] == "consume"
    timeout = 60.0
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "enable.idempotence": acks == "all", "queue.buffering.max.messages": 1000000})
    value = b"x" * size
    delivered = [0, 0]

    def report(err, _msg):
        delivered[1 if err else 0] += 1

    start = time.monotonic()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(timeout)
    secs = time.monotonic() - start
    if delivered != [n, 0]:
        sys.exit("delivered %d, failed %d of %d" % (delivered[0], delivered[1], n))
    print("confluent-kafka produce: %d records in %.3f s: %.0f records/s, %.2f MB/s"
          % (n, secs, n / secs, n * size / secs / 1e6), flush=True)
    if not consume:
        return
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, nbytes = 0, 0
    start = time.monotonic()
    while got < n and time.monotonic() - start < timeout:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    secs = time.monotonic() - start
    c.close()
    print("confluent-kafka consume: %d records in %.3f s: %.0f records/s, %.2f MB/s"
          % (got, secs, got / secs, nbytes / secs / 1e6), flush=True)


if __name__ == "__main__":
    main()
