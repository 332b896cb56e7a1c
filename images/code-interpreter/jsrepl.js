// Warren's code interpreter: a JavaScript context. Reads one JSON request
// a line on stdin ({id, code, envs, env_vars}), runs the code in one
// persistent vm context (so top-level declarations persist), and writes
// JSON lines on stdout: stdout/stderr from console, the last expression's
// value as the main result, an uncaught error, then {type: "done"}. A
// request with a seed (hex; the server sends one after the sandbox was
// restored) reseeds the cells' Math.random first.
'use strict'
const crypto = require('node:crypto')
const readline = require('node:readline')
const util = require('node:util')
const vm = require('node:vm')

const write = (msg) => process.stdout.write(JSON.stringify(msg) + '\n')
let current = null
const emit = (type) => (...args) => {
  if (current) write({ id: current, type, text: util.format(...args) + '\n' })
}
const sandboxConsole = {
  log: emit('stdout'), info: emit('stdout'), debug: emit('stdout'),
  error: emit('stderr'), warn: emit('stderr'), trace: emit('stderr'),
  dir: (o) => emit('stdout')(util.inspect(o)),
  table: emit('stdout'),
}
const context = vm.createContext({
  console: sandboxConsole, require, process, Buffer, URL, URLSearchParams,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  TextEncoder, TextDecoder, fetch: globalThis.fetch, structuredClone, queueMicrotask,
})
let executionCount = 0

// The cells' Math.random: xoshiro128** over a seed of 16 bytes, drawn
// here at start and given by the server after a restore. V8's own
// generator would continue from the image's state in every copy of a
// restored sandbox, and it cannot be reseeded.
const rng = new Uint32Array(4)
const rotl = (x, k) => ((x << k) | (x >>> (32 - k))) >>> 0
const next32 = () => {
  const result = Math.imul(rotl(Math.imul(rng[1], 5) >>> 0, 7), 9) >>> 0
  const t = rng[1] << 9
  rng[2] ^= rng[0]
  rng[3] ^= rng[1]
  rng[1] ^= rng[2]
  rng[0] ^= rng[3]
  rng[2] ^= t
  rng[3] = rotl(rng[3], 11)
  return result
}
const seed = (bytes) => {
  const h = crypto.createHash('sha256').update(bytes).digest()
  for (let i = 0; i < 4; i++) rng[i] = h.readUInt32LE(4 * i)
  if (!(rng[0] | rng[1] | rng[2] | rng[3])) rng[0] = 1
}
seed(crypto.randomBytes(32))
Object.defineProperty(vm.runInContext('Math', context), 'random', {
  value: function random () { return ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992 },
  writable: true, configurable: true, enumerable: false,
})

async function run(req) {
  current = req.id
  if (typeof req.seed === 'string' && req.seed) seed(Buffer.from(req.seed, 'hex'))
  const saved = {}
  Object.assign(process.env, req.envs || {})
  for (const [k, v] of Object.entries(req.env_vars || {})) {
    saved[k] = process.env[k]
    process.env[k] = v
  }
  write({ id: req.id, type: 'number_of_executions', execution_count: ++executionCount })
  try {
    let value = new vm.Script(req.code, { filename: `cell-${executionCount}.js` }).runInContext(context)
    if (value && typeof value.then === 'function') value = await value
    if (value !== undefined) write({ id: req.id, type: 'result', is_main_result: true, text: util.inspect(value) })
  } catch (e) {
    const name = e && e.name ? e.name : 'Error'
    const value = e && e.message !== undefined ? e.message : String(e)
    write({ id: req.id, type: 'error', name, value, traceback: e && e.stack ? e.stack : String(e) })
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
    write({ id: req.id, type: 'done' })
    current = null
  }
}

let chain = Promise.resolve()
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let req
  try { req = JSON.parse(line) } catch { return }
  chain = chain.then(() => run(req))
})
