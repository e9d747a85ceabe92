"""Shared by the client round-trip scripts: deterministic messages and the comparison.

Each script produces N keyed messages, reads every partition back from the beginning without a
consumer group, and checks that each partition holds exactly the messages acknowledged for it,
byte for byte and in send order (each message once). It prints one `compared ...` line that the
Rust test (realnet/tests/python_clients.rs) checks, so a run that compared nothing fails.
"""

import random
import sys
import time


def messages(n, seed):
    """N (key, value) pairs: distinct keys, values of 0..2000 arbitrary bytes (NULs included)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"key-%05d" % i
        size = rng.randrange(0, 2000)
        value = b"v%05d:" % i + bytes(rng.getrandbits(8) for _ in range(size))
        out.append((key, value))
    return out


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def compare(client, sent, acked, consumed):
    """sent: [(key, value)] in send order; acked: {index: (partition, offset)};
    consumed: {partition: [(offset, key, value)]} as read back."""
    if len(acked) != len(sent):
        fail("%d of %d messages acknowledged" % (len(acked), len(sent)))
    expected = {}
    for i, (key, value) in enumerate(sent):
        partition, offset = acked[i]
        expected.setdefault(partition, []).append((offset, key, value))
    for partition, rows in expected.items():
        offsets = [o for o, _, _ in rows]
        # Send order is offset order within a partition, with no gaps and no duplicates.
        if offsets != list(range(len(rows))):
            fail("partition %d: acknowledged offsets are not 0..%d in send order" % (partition, len(rows)))
    if sorted(consumed) != sorted(expected):
        fail("consumed partitions %s, acknowledged %s" % (sorted(consumed), sorted(expected)))
    total = 0
    for partition, rows in sorted(expected.items()):
        got = consumed[partition]
        if len(got) != len(rows):
            fail("partition %d: consumed %d messages, acknowledged %d" % (partition, len(got), len(rows)))
        for want, have in zip(rows, got):
            if want != have:
                fail("partition %d offset %d: consumed %r, sent %r"
                     % (partition, want[0], (have[0], have[1], have[2][:40]), (want[0], want[1], want[2][:40])))
        total += len(got)
    if total != len(sent) or total == 0:
        fail("compared %d messages, sent %d" % (total, len(sent)))
    sizes = ", ".join("p%d=%d" % (p, len(r)) for p, r in sorted(expected.items()))
    print("%s: compared %d messages byte for byte across %d partitions (%s)"
          % (client, total, len(expected), sizes), flush=True)


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def check(self, what):
        if self.left() <= 0:
            fail("timed out " + what)
