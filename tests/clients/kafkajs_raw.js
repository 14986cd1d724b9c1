// Sends requests written by KafkaJS's own encoders, in any version KafkaJS has, each on a
// connection of its own, and prints what KafkaJS's own decoders read from each answer (or
// that the connection was closed without one). One JSON object per request, one line.
//
//   node kafkajs_raw.js '{"address": "127.0.0.1:9092",
//                         "requests": [{"api": "CreateTopics", "version": 0, "args": {...}}]}'
//
// KafkaJS's clients pick one version per API; this reaches every version it can write, with
// encoders independent of the gateway's (kio), so the gateway's reading of each is checked
// against another implementation of the protocol.
'use strict'

const net = require('net')
const { requests } = require('kafkajs/src/protocol/requests')
const encodeRequest = require('kafkajs/src/protocol/request')
const Decoder = require('kafkajs/src/protocol/decoder')

const spec = JSON.parse(process.argv[2])
const [host, port] = [spec.address.slice(0, spec.address.lastIndexOf(':')), Number(spec.address.split(':').pop())]

function exchange(frame) {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port }, () => socket.write(frame))
    let received = Buffer.alloc(0)
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error('no answer and no close within 15 s'))
    }, 15000)
    const finish = result => {
      clearTimeout(timer)
      socket.destroy()
      resolve(result)
    }
    socket.on('data', chunk => {
      received = Buffer.concat([received, chunk])
      if (received.length >= 4 && received.length >= 4 + received.readInt32BE(0)) {
        finish(received.subarray(4, 4 + received.readInt32BE(0)))
      }
    })
    socket.on('close', () => finish(null))
    socket.on('error', () => finish(null))
  })
}

// Long values (offsets) and Buffers as strings, for JSON.
const plain = (_, v) =>
  typeof v === 'bigint' || (v && typeof v === 'object' && v.constructor && v.constructor.name === 'Long')
    ? String(v)
    : v

async function main() {
  for (const [index, { api, version, args }] of spec.requests.entries()) {
    const { request, response } = requests[api].protocol({ version })(args)
    const frame = await encodeRequest({
      correlationId: index + 1,
      clientId: 'kpg-kafkajs-raw',
      request,
    })
    const answer = await exchange(frame.buffer)
    let out
    if (answer === null) {
      out = { api, version, closed: true }
    } else {
      const decoder = new Decoder(answer)
      const correlationId = decoder.readInt32()
      const data = await response.decode(decoder.readAll())
      out = { api, version, closed: false, correlationId, data }
    }
    process.stdout.write(JSON.stringify(out, plain) + '\n')
  }
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`${e.stack}\n`)
    process.exit(1)
  }
)
