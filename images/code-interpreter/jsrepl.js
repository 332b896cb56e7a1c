// Warren's code interpreter: a JavaScript context. Reads one JSON request
// a line on stdin ({id, code, envs, env_vars}), runs the code in one
// persistent vm context (so top-level declarations persist), and writes
// JSON lines on stdout: stdout/stderr from console, the last expression's
// value as the main result, an uncaught error, then {type: "done"}.
'use strict'
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

async function run(req) {
  current = req.id
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
