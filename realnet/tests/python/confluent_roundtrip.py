"""confluent-kafka (librdkafka) against `gregor dev`: an idempotent producer (acks=all), then a
group-less consumer that assign()s every partition from the beginning.

usage: confluent_roundtrip.py BOOTSTRAP TOPIC PARTITIONS N TIMEOUT_SECONDS
"""

import sys
from importlib import metadata

from confluent_kafka import Consumer, KafkaError, OFFSET_BEGINNING, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from common import Deadline, compare, fail, messages


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, n, timeout = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    deadline = Deadline(timeout)
    errors = []

    def on_error(err):
        # librdkafka reports transient connection trouble here too; record it for the failure text.
        errors.append(str(err))

    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": on_error})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  request_timeout=10)
    futures[topic].result(timeout=max(1, deadline.left()))
    # Every topic (a Metadata request with a null topic array, which librdkafka sends with three
    # stray bytes after it): Gregor once closed the connection on it.
    listed = admin.list_topics(timeout=max(1, deadline.left())).topics
    if topic not in listed:
        fail("list_topics() lacks %s: %s" % (topic, sorted(listed)))
    print("list_topics() lists %d topic(s), %s among them" % (len(listed), topic))

    sent = messages(n, seed=1)
    acked = {}
    delivery_errors = []

    def on_delivery(index):
        def report(err, msg):
            if err is not None:
                delivery_errors.append("message %d: %s" % (index, err))
            elif index in acked:
                delivery_errors.append("message %d acknowledged twice" % index)
            else:
                acked[index] = (msg.partition(), msg.offset())
        return report

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000 / 2),
        "error_cb": on_error,
    })
    for i, (key, value) in enumerate(sent):
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery(i))
                break
            except BufferError:
                producer.poll(0.1)
                deadline.check("waiting for room in the producer queue")
        producer.poll(0)
    remaining = producer.flush(max(1, deadline.left()))
    if remaining:
        fail("%d messages still in flight after flush; errors: %s" % (remaining, errors[-5:]))
    if delivery_errors:
        fail("%d failed deliveries, first: %s" % (len(delivery_errors), delivery_errors[:3]))
    if len(acked) != n:
        fail("%d of %d delivery reports" % (len(acked), n))

    # No consumer group: assign() with explicit offsets, nothing committed. librdkafka wants a
    # group.id for any Consumer; with assign() and no commits it never asks for a coordinator.
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "gregor-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "error_cb": on_error,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    consumed = {p: [] for p in range(partitions)}
    at_eof = set()
    while len(at_eof) < partitions or sum(len(v) for v in consumed.values()) < n:
        deadline.check("consuming: %d of %d read; errors: %s"
                       % (sum(len(v) for v in consumed.values()), n, errors[-5:]))
        msg = consumer.poll(min(1.0, max(0.01, deadline.left())))
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition())
                continue
            fail("consumer: %s" % msg.error())
        at_eof.discard(msg.partition())
        consumed[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    producer.flush(1)
    if errors:
        fail("librdkafka reported %d errors, first: %s" % (len(errors), errors[:3]))
    client = "confluent-kafka %s (librdkafka %s)" % (metadata.version("confluent-kafka"), libversion()[0])
    compare(client, sent, acked, {p: v for p, v in consumed.items() if v})


if __name__ == "__main__":
    main()
