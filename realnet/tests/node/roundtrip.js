// kafkajs against `gregor dev`: the admin client creates a 3-partition topic, a producer sends N
// keyed messages with acks=all, and a consumer in a group reads them all back, committing
// offsets; every message must arrive exactly once with its value intact. Prints one
// `compared ...` line that realnet/tests/kafkajs.rs checks. Bounded by TIMEOUT_SECONDS.
//
// usage: node roundtrip.js BOOTSTRAP TOPIC N TIMEOUT_SECONDS

const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, nText, timeoutText] = process.argv.slice(2);
  const n = Number(nText);
  const timeoutMs = Number(timeoutText) * 1000;
  const timer = setTimeout(() => {
    console.error('FAIL: timed out after ' + timeoutText + ' s');
    process.exit(2);
  }, timeoutMs);
  const kafka = new Kafka({ clientId: 'gregor-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN });

  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true });
  await admin.disconnect();

  const producer = kafka.producer({ idempotent: true });
  await producer.connect();
  const sent = new Map();
  for (let start = 0; start < n; start += 100) {
    const messages = [];
    for (let i = start; i < Math.min(n, start + 100); i++) {
      const value = 'value-' + i + '-' + 'x'.repeat(i % 50);
      sent.set('key-' + i, value);
      messages.push({ key: 'key-' + i, value });
    }
    await producer.send({ topic, acks: -1, messages });
  }
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: 'gregor-kafkajs-group', sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = new Map();
  const partitions = new Set();
  let duplicates = 0;
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const key = message.key.toString();
        if (seen.has(key)) duplicates++;
        seen.set(key, message.value.toString());
        partitions.add(partition);
        if (seen.size === n) resolve();
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  clearTimeout(timer);

  if (duplicates !== 0) throw new Error(duplicates + ' duplicates');
  for (const [key, value] of sent) {
    if (seen.get(key) !== value) throw new Error('message ' + key + ' differs or is missing');
  }
  console.log('kafkajs: compared ' + n + ' messages across ' + partitions.size + ' partitions through a consumer group');
}

main().catch((e) => {
  console.error('FAIL: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
