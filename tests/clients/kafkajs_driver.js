// Runs KafkaJS steps against one bootstrap address and prints one JSON object: each step's
// result or error, and every address KafkaJS opened a socket to.
//
//   node kafkajs_driver.js '{"bootstrap": "127.0.0.1:9092", "steps": [{"op": "createTopics", ...}]}'
//
// Optional: "caFile" (TLS to the bootstrap address, trusting that CA) and "sasl" (KafkaJS's
// sasl option: mechanism "plain", "scram-sha-256" or "scram-sha-512", username, password).
//
// KafkaJS runs with its default retry settings (a retriable error is retried five times with
// backoff): a step that fails shows what a KafkaJS application would see.
'use strict'

const fs = require('fs')
const net = require('net')
const tls = require('tls')
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const spec = JSON.parse(process.argv[2])
const connections = []
const wire = {}

// What KafkaJS decoded from each answer of these APIs before it turned errors into
// exceptions: its exceptions carry only the error code's type, not the answer's message.
const { requests } = require('kafkajs/src/protocol/requests')
for (const name of [
  'CreateTopics',
  'DeleteTopics',
  'DeleteRecords',
  'CreatePartitions',
  'AlterConfigs',
  'Produce',
]) {
  const definition = requests[name]
  const protocol = definition.protocol
  definition.protocol = ({ version }) => {
    const build = protocol({ version })
    return args => {
      const built = build(args)
      const parse = built.response.parse
      const record = async data => {
        ;(wire[name] = wire[name] || []).push({ version: Number(version), data })
        return parse(data)
      }
      return { ...built, response: { ...built.response, parse: record } }
    }
  }
}

const ssl = spec.caFile ? { ca: [fs.readFileSync(spec.caFile, 'utf-8')] } : undefined

const kafka = new Kafka({
  clientId: 'kpg-kafkajs-test',
  brokers: [spec.bootstrap],
  logLevel: logLevel.NOTHING,
  connectionTimeout: 5000,
  requestTimeout: 15000,
  ssl,
  sasl: spec.sasl,
  socketFactory: ({ host, port, ssl, onConnect }) => {
    connections.push(`${host}:${port}`)
    if (ssl) {
      const servername = net.isIP(host) ? {} : { servername: host }
      return tls.connect(Object.assign({ host, port }, servername, ssl), onConnect)
    }
    return net.connect({ host, port }, onConnect)
  },
})

const describeError = e => ({
  name: e.name,
  type: e.type,
  code: e.code,
  retriable: e.retriable,
  message: e.message,
  errors: Array.isArray(e.errors) ? e.errors.map(describeError) : undefined,
})

const compression = name => CompressionTypes[name || 'None']

async function produce(step) {
  const producer = kafka.producer({ allowAutoTopicCreation: !!step.allowAutoTopicCreation })
  await producer.connect()
  try {
    return await producer.send({
      topic: step.topic,
      acks: step.acks === undefined ? -1 : step.acks,
      compression: compression(step.compression),
      messages: step.messages,
    })
  } finally {
    await producer.disconnect()
  }
}

async function sendBatch(step) {
  const producer = kafka.producer({
    allowAutoTopicCreation: false,
    idempotent: !!step.transactionalId,
    transactionalId: step.transactionalId,
    maxInFlightRequests: step.transactionalId ? 1 : undefined,
  })
  await producer.connect()
  try {
    if (!step.transactionalId) {
      return await producer.sendBatch({ acks: -1, topicMessages: step.topicMessages })
    }
    const transaction = await producer.transaction()
    try {
      await transaction.sendBatch({ acks: -1, topicMessages: step.topicMessages })
    } catch (e) {
      await transaction.abort()
      throw e
    }
    await transaction.commit()
    return 'committed'
  } finally {
    await producer.disconnect()
  }
}

async function consume(step) {
  const consumer = kafka.consumer({
    groupId: step.groupId,
    maxWaitTimeInMs: 100,
    sessionTimeout: 6000,
    rebalanceTimeout: 1000,
  })
  await consumer.connect()
  const values = []
  try {
    await consumer.subscribe({ topics: [step.topic], fromBeginning: true })
    await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`consumed ${values.length} of ${step.count}`)),
        step.timeoutMs || 30000
      )
      consumer
        .run({
          eachMessage: async ({ message }) => {
            values.push(message.value === null ? null : message.value.toString())
            if (values.length >= step.count) {
              clearTimeout(timer)
              resolve()
            }
          },
        })
        .catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  return values
}

async function withAdmin(action) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await action(admin)
  } finally {
    await admin.disconnect()
  }
}

const ops = {
  createTopics: step =>
    withAdmin(admin =>
      admin.createTopics({
        topics: step.topics,
        validateOnly: !!step.validateOnly,
        waitForLeaders: !step.validateOnly,
        timeout: 10000,
      })
    ),
  deleteTopics: step =>
    withAdmin(admin => admin.deleteTopics({ topics: step.topics, timeout: 10000 })),
  createPartitions: step =>
    withAdmin(admin =>
      admin.createPartitions({ topicPartitions: step.topicPartitions, timeout: 10000 })
    ),
  alterConfigs: step =>
    withAdmin(admin =>
      admin.alterConfigs({ validateOnly: !!step.validateOnly, resources: step.resources })
    ),
  describeConfigs: step =>
    withAdmin(admin =>
      admin.describeConfigs({ includeSynonyms: false, resources: step.resources })
    ),
  listTopics: () => withAdmin(admin => admin.listTopics()),
  describeCluster: () => withAdmin(admin => admin.describeCluster()),
  fetchTopicOffsets: step => withAdmin(admin => admin.fetchTopicOffsets(step.topic)),
  deleteTopicRecords: step =>
    withAdmin(async admin => {
      // KafkaJS finds the partitions' leaders in metadata it must have loaded already
      await admin.fetchTopicMetadata({ topics: [step.topic] })
      return admin.deleteTopicRecords({ topic: step.topic, partitions: step.partitions })
    }),
  fetchTopicMetadata: step => withAdmin(admin => admin.fetchTopicMetadata({ topics: step.topics })),
  produce,
  sendBatch,
  consume,
}

async function main() {
  const results = []
  for (const step of spec.steps) {
    try {
      results.push({ op: step.op, ok: true, result: (await ops[step.op](step)) ?? null })
    } catch (e) {
      results.push({ op: step.op, ok: false, error: describeError(e) })
    }
  }
  const bigints = (_, v) => (typeof v === 'bigint' ? String(v) : v)
  process.stdout.write(JSON.stringify({ results, connections, wire }, bigints) + '\n')
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`${e.stack}\n`)
    process.exit(1)
  }
)
