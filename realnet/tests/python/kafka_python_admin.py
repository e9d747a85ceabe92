"""kafka-python's admin client against `gregor dev`: DescribeConfigs and DeleteTopics.

Creates TOPIC with retention.ms=12345, checks DescribeConfigs shows that override as a dynamic
topic config and the other effective configs (segment.bytes, cleanup.policy, ...) as defaults,
that the broker resource answers read-only entries, and that an unknown topic gets
UNKNOWN_TOPIC_OR_PARTITION. Then produces one message, deletes the topic and checks it is gone:
absent from the topic list, DescribeConfigs and a second delete answer UNKNOWN_TOPIC_OR_PARTITION.
Prints one `compared ...` line that realnet/tests/python_clients.rs checks.

usage: kafka_python_admin.py BOOTSTRAP TOPIC
"""

import sys

from kafka import KafkaProducer
from kafka import errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from common import fail


def raw_describe(admin, resources):
    """DescribeConfigs as sent on the wire: kafka-python's describe_configs drops per-resource
    error codes, which is what this test checks."""
    request = admin._describe_configs_request(resources)
    return admin._manager.run(admin._manager.send, request)


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    checks = 0
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "12345"})])

    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True, config_filter="all"
    )
    configs = described["topic"][topic]
    want = {
        "retention.ms": ("12345", "DYNAMIC_TOPIC_CONFIG"),
        "segment.bytes": ("1073741824", "DEFAULT_CONFIG"),
        "cleanup.policy": ("delete", "DEFAULT_CONFIG"),
        "min.insync.replicas": ("1", "DEFAULT_CONFIG"),
        "max.message.bytes": ("1048588", "DEFAULT_CONFIG"),
        "retention.bytes": ("-1", "DEFAULT_CONFIG"),
    }
    for name, (value, source) in want.items():
        got = configs.get(name)
        if got is None:
            fail("DescribeConfigs lacks %s: %s" % (name, configs))
        if (got["value"], got["config_source"], got["read_only"]) != (value, source, False):
            fail("%s: got %s, want value %s source %s writable" % (name, got, value, source))
        checks += 1

    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    if sorted(modified["topic"][topic]) != ["retention.ms"]:
        fail("the 'modified' filter shows %s, want only retention.ms" % sorted(modified["topic"][topic]))
    checks += 1

    broker = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
    )["broker"]["0"]
    if broker.get("log.retention.ms", {}).get("value") != "604800000" or not all(
        c["read_only"] for c in broker.values()
    ):
        fail("broker configs: %s" % broker)
    checks += 1

    response = raw_describe(admin, [ConfigResource(ConfigResourceType.TOPIC, "no-such-topic")])
    code = response.results[0].error_code
    if code != Errors.UnknownTopicOrPartitionError.errno:
        fail("DescribeConfigs of an unknown topic answered error %d" % code)
    checks += 1

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000)
    producer.send(topic, b"before delete", partition=0).get(timeout=15)
    producer.close()

    if topic not in admin.list_topics():
        fail("%s missing from the topic list before delete" % topic)
    result = admin.delete_topics([topic])
    if [t["error_code"] for t in result["topics"]] != [0]:
        fail("delete_topics answered %s" % result)
    if topic in admin.list_topics():
        fail("%s still listed after delete" % topic)
    checks += 1

    response = raw_describe(admin, [ConfigResource(ConfigResourceType.TOPIC, topic)])
    if response.results[0].error_code != Errors.UnknownTopicOrPartitionError.errno:
        fail("DescribeConfigs of the deleted topic answered %s" % response.results[0])
    checks += 1

    try:
        admin.delete_topics([topic])
        fail("deleting %s twice succeeded" % topic)
    except Errors.UnknownTopicOrPartitionError:
        checks += 1
    admin.close()
    print("compared %d admin checks (describe configs, delete topics)" % checks, flush=True)


if __name__ == "__main__":
    main()
