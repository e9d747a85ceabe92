"""kafka-python (pure Python) against `gregor dev`: KafkaProducer (acks='all'), then a
KafkaConsumer without a group (group_id=None) that assign()s every partition and seeks to the
beginning.

usage: kafka_python_roundtrip.py BOOTSTRAP TOPIC PARTITIONS N TIMEOUT_SECONDS
"""

import logging
import sys
from importlib import metadata

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from common import Deadline, compare, fail, messages


class ErrorLog(logging.Handler):
    """Keeps kafka-python's own ERROR records: it logs and retries failures (a dropped connection,
    an oversized frame) that would otherwise leave a passing run with a hidden interop bug."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, n, timeout = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    deadline = Deadline(timeout)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    errors = ErrorLog()
    logging.getLogger("kafka").addHandler(errors)
    # No api_version: kafka-python probes it with ApiVersions and negotiates each request's
    # version from the broker's answer, which is what the test means to exercise.
    common = {"bootstrap_servers": bootstrap, "request_timeout_ms": 15000}

    admin = KafkaAdminClient(**common)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        timeout_ms=10000)
    admin.close()

    sent = messages(n, seed=2)
    producer = KafkaProducer(acks="all", linger_ms=5, max_block_ms=10000, **common)
    probed = producer.config["api_version"]
    futures = [producer.send(topic, key=key, value=value) for key, value in sent]
    producer.flush(timeout=max(1, deadline.left()))
    acked = {}
    for i, future in enumerate(futures):
        if not future.is_done:
            fail("message %d not acknowledged after flush" % i)
        if future.failed():
            fail("message %d: %r" % (i, future.exception))
        md = future.value
        acked[i] = (md.partition, md.offset)
    producer.close(timeout=10)

    consumer = KafkaConsumer(group_id=None, enable_auto_commit=False, **common)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    consumed = {p: [] for p in range(partitions)}
    while any(consumer.position(tp) < end[tp] for tp in tps):
        deadline.check("consuming: %d of %d read" % (sum(len(v) for v in consumed.values()), n))
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for r in records:
                consumed[tp.partition].append((r.offset, r.key, r.value))
    consumer.close()
    if errors.records:
        fail("kafka-python logged %d errors, first: %s" % (len(errors.records), errors.records[:3]))
    client = "kafka-python %s (probed api_version %s)" % (metadata.version("kafka-python"),
                                                         ".".join(map(str, probed)))
    compare(client, sent, acked, {p: v for p, v in consumed.items() if v})


if __name__ == "__main__":
    main()
