"""confluent-kafka (librdkafka) over SASL: as an allowed user, create a topic, produce N messages
with acks=all and read them back (group-less, assign from the beginning), comparing byte for
byte; with a wrong password, the login must be refused with an authentication error and nothing
else must work: a message produced then is not delivered.

usage: confluent_sasl.py BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD ok|refused TOPIC N TIMEOUT_SECONDS [CA_PEM]
(CA_PEM: the CA to trust over SSL / SASL_SSL)
"""

import sys

from confluent_kafka import Consumer, KafkaError, OFFSET_BEGINNING, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from common import Deadline, compare, fail, messages


def main():
    bootstrap, protocol, mechanism, user, password, mode, topic = sys.argv[1:8]
    n, timeout = int(sys.argv[8]), float(sys.argv[9])
    deadline = Deadline(timeout)
    errors = []
    security = {
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": lambda err: errors.append(err),
    }
    if len(sys.argv) > 10:
        security["ssl.ca.location"] = sys.argv[10]
    if mode == "refused":
        # A producer, whose poll() serves error_cb (an AdminClient's calls do not).
        producer = Producer(security)
        try:
            producer.list_topics(timeout=min(5, max(1, deadline.left())))
            fail("metadata answered with a wrong password")
        except Exception:  # KafkaException: no broker could be reached after login
            pass
        while not errors and deadline.left() > 0:
            producer.poll(0.2)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if not auth:
            fail("no authentication error reported; errors: %s" % [str(e) for e in errors])
        reports = []
        bounded = Producer(dict(security, **{"message.timeout.ms": 3000}))
        bounded.produce(topic, value=b"must not land", on_delivery=lambda err, msg: reports.append(err))
        bounded.flush(min(10, max(1, deadline.left())))
        if not reports or reports[0] is None:
            fail("a produce with a wrong password was delivered (reports %s)" % reports)
        print("refused: %s" % auth[0].str(), flush=True)
        return

    admin = AdminClient(security)
    futures = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], request_timeout=10)
    futures[topic].result(timeout=max(1, deadline.left()))
    sent = messages(n, seed=7)
    acked = {}
    delivery_errors = []

    def on_delivery(index):
        def report(err, msg):
            if err is not None:
                delivery_errors.append("message %d: %s" % (index, err))
            else:
                acked[index] = (msg.partition(), msg.offset())
        return report

    producer = Producer(dict(security, **{"acks": "all", "linger.ms": 5,
                                          "message.timeout.ms": int(timeout * 1000 / 2)}))
    for i, (key, value) in enumerate(sent):
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery(i))
        producer.poll(0)
    left = producer.flush(max(1, deadline.left()))
    if left or delivery_errors:
        fail("%d undelivered; errors: %s" % (left, delivery_errors[:5]))

    consumer = Consumer(dict(security, **{"group.id": "unused", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    consumed = {}
    while sum(len(v) for v in consumed.values()) < n and deadline.left() > 0:
        msg = consumer.poll(min(1.0, max(0.1, deadline.left())))
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            fail("consume error: %s" % msg.error())
        consumed.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    compare("confluent-kafka over %s/%s as %s" % (protocol, mechanism, user), sent, acked, consumed)


if __name__ == "__main__":
    main()
