"""confluent-kafka (librdkafka) as one SCRAM user under an authorizer: one step of the ACL process
test (realnet/tests/security.rs), which judges what this prints.

usage: confluent_acl.py BOOTSTRAP MECHANISM USER PASSWORD MODE TOPIC N TIMEOUT_SECONDS
modes:
  produce      produce N messages (acks=all); print "produced N"
  consume      read N messages from the beginning (assign, no commits); print "consumed N"
  roundtrip    produce N, read them back, compare byte for byte
  denied-produce   produce one message; it must fail with TOPIC_AUTHORIZATION_FAILED
  denied-consume   Metadata for TOPIC must say TOPIC_AUTHORIZATION_FAILED and no record arrive
  end-offset   print "end-offset X": the sum of TOPIC's partitions' high watermarks
  refused      the login must be refused with an authentication error
"""

import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, OFFSET_BEGINNING, Producer, TopicPartition

from common import Deadline, compare, fail, messages


def main():
    bootstrap, mechanism, user, password, mode, topic = sys.argv[1:7]
    n, timeout = int(sys.argv[7]), float(sys.argv[8])
    deadline = Deadline(timeout)
    errors = []
    security = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": lambda err: errors.append(err),
    }

    def partitions():
        md = Producer(security).list_topics(topic, timeout=max(1, deadline.left()))
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            fail("no metadata for %s: %s" % (topic, t and t.error))
        return sorted(t.partitions)

    def produce(count):
        sent = messages(count, seed=11)
        acked, delivery_errors = {}, []

        def on_delivery(index):
            def report(err, msg):
                if err is not None:
                    delivery_errors.append(err)
                else:
                    acked[index] = (msg.partition(), msg.offset())
            return report

        producer = Producer(dict(security, **{"acks": "all", "linger.ms": 5,
                                              "message.timeout.ms": int(timeout * 1000 / 2)}))
        for i, (key, value) in enumerate(sent):
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery(i))
            producer.poll(0)
        left = producer.flush(max(1, deadline.left()))
        return sent, acked, delivery_errors, left

    def consume(count, parts):
        consumer = Consumer(dict(security, **{"group.id": "g-" + user, "enable.auto.commit": False,
                                              "enable.partition.eof": False}))
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        consumed, errs = {}, []
        while sum(len(v) for v in consumed.values()) < count and deadline.left() > 0:
            # librdkafka reports a refused topic either as a message error or through error_cb.
            if any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors):
                errs.extend(errors)
                break
            msg = consumer.poll(min(1.0, max(0.1, deadline.left())))
            if msg is None:
                continue
            if msg.error():
                errs.append(msg.error())
                if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    break
                continue
            consumed.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
        consumer.close()
        return consumed, errs

    if mode == "refused":
        producer = Producer(security)
        try:
            producer.list_topics(timeout=min(5, max(1, deadline.left())))
            fail("metadata answered with a refused login")
        except KafkaException:
            pass
        while not errors and deadline.left() > 0:
            producer.poll(0.2)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if not auth:
            fail("no authentication error reported; errors: %s" % [str(e) for e in errors])
        print("refused: %s" % auth[0].str(), flush=True)
    elif mode == "end-offset":
        consumer = Consumer(dict(security, **{"group.id": "g-" + user}))
        total = 0
        for p in partitions():
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=max(1, deadline.left()))
            total += high
        consumer.close()
        print("end-offset %d" % total, flush=True)
    elif mode == "produce":
        _, acked, delivery_errors, left = produce(n)
        if left or delivery_errors:
            fail("%d undelivered; errors: %s" % (left, [str(e) for e in delivery_errors[:5]]))
        print("produced %d" % len(acked), flush=True)
    elif mode == "denied-produce":
        _, acked, delivery_errors, left = produce(1)
        codes = [e.code() for e in delivery_errors]
        if acked or KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes:
            fail("produce was not refused: acked %s, errors %s" % (acked, [str(e) for e in delivery_errors]))
        print("denied-produce: %s" % delivery_errors[0].str(), flush=True)
    elif mode == "consume":
        consumed, errs = consume(n, [0])
        got = sum(len(v) for v in consumed.values())
        if got != n:
            fail("consumed %d of %d; errors %s" % (got, n, [str(e) for e in errs[:5]]))
        print("consumed %d" % got, flush=True)
    elif mode == "denied-consume":
        # librdkafka's assign() waits quietly for a topic whose Metadata is refused, so the
        # refusal is read from Metadata (what the consumer acts on), and nothing may arrive.
        md = Producer(security).list_topics(topic, timeout=max(1, deadline.left()))
        t = md.topics.get(topic)
        code = t.error.code() if t is not None and t.error is not None else None
        if code != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            fail("metadata for %s was not refused: %s" % (topic, t and t.error))
        short = Deadline(5)
        consumer = Consumer(dict(security, **{"group.id": "g-" + user, "enable.auto.commit": False}))
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        while short.left() > 0:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        consumer.close()
        if got:
            fail("consumed %d records of a refused topic" % got)
        print("denied-consume: %s; 0 records in 5 s" % t.error.str(), flush=True)
    elif mode == "roundtrip":
        sent, acked, delivery_errors, left = produce(n)
        if left or delivery_errors:
            fail("%d undelivered; errors: %s" % (left, [str(e) for e in delivery_errors[:5]]))
        consumed, errs = consume(n, partitions())
        compare("confluent-kafka over SASL_PLAINTEXT/%s as %s" % (mechanism, user), sent, acked, consumed)
    else:
        fail("unknown mode %s" % mode)


if __name__ == "__main__":
    main()
