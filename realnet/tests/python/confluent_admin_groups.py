"""confluent-kafka's AdminClient against `gregor dev`: list_consumer_groups (ListGroups) and
describe_consumer_groups (DescribeGroups) while one member of a group is consuming, and again
after it left.

A member (client.id "admin-groups-member") joins GROUP, reads the N messages of a 2-partition
topic and commits them. While it is in the group, the group must be listed as STABLE and
described with that member: its client id, a host, and both partitions assigned to it. After it
closes, the group is listed EMPTY (its committed offsets keep it). Prints one `compared ...`
line that realnet/tests/python_clients.rs checks.

usage: confluent_admin_groups.py BOOTSTRAP TOPIC GROUP N TIMEOUT_SECONDS
"""

import sys

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from common import Deadline, fail

PARTITIONS = 2
CLIENT_ID = "admin-groups-member"


def listed(admin, group):
    result = admin.list_consumer_groups(request_timeout=10).result()
    if result.errors:
        fail("list_consumer_groups errors: %s" % result.errors)
    return {g.group_id: g for g in result.valid}.get(group)


def main():
    bootstrap, topic, group, n, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    deadline = Deadline(timeout)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, b"m-%d" % i, partition=i % PARTITIONS)
    if p.flush(30) != 0:
        fail("produce did not flush")

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": CLIENT_ID,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    })
    c.subscribe([topic])
    got = 0
    while got < n:
        deadline.check("consuming %d of %d" % (got, n))
        msgs = c.consume(100, 0.2)
        for m in msgs:
            if m.error():
                fail("consume: %s" % m.error())
        got += len(msgs)
        if msgs:
            c.commit(asynchronous=False)

    g = listed(admin, group)
    if g is None or g.state != ConsumerGroupState.STABLE or g.is_simple_consumer_group:
        fail("while a member consumes, %s is listed as %s" % (group, g and (g.state, g.is_simple_consumer_group)))
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    if described.state != ConsumerGroupState.STABLE or len(described.members) != 1:
        fail("described as %s with %d members" % (described.state, len(described.members)))
    m = described.members[0]
    assigned = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
    if m.client_id != CLIENT_ID or not m.host or assigned != [(topic, p) for p in range(PARTITIONS)]:
        fail("member described as client %r host %r assigned %s" % (m.client_id, m.host, assigned))
    wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    offsets = admin.list_consumer_group_offsets([wanted])[group].result()
    committed = sum(tp.offset for tp in offsets.topic_partitions)
    if committed != n:
        fail("committed offsets add up to %d, not %d" % (committed, n))

    c.close()
    g = listed(admin, group)
    if g is None or g.state != ConsumerGroupState.EMPTY:
        fail("after the member left, %s is listed as %s" % (group, g and g.state))
    print("compared 1 group listed STABLE then EMPTY, 1 member (client %s, host %s, %d partitions), "
          "%d committed offsets" % (m.client_id, m.host, len(assigned), committed), flush=True)


if __name__ == "__main__":
    main()
