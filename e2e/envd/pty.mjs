// PTY create, input, resize through the real E2B SDK in debug mode.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create()
let data = ''
let sawSize
const sized = new Promise((resolve) => { sawSize = resolve })
const term = await sbx.pty.create({
  cols: 80,
  rows: 24,
  onData: (d) => {
    data += new TextDecoder().decode(d)
    if (data.includes('40 100')) sawSize()
  },
})
assert.ok(term.pid > 0)
await sbx.pty.resize(term.pid, { cols: 100, rows: 40 })
await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
await sized
await sbx.pty.sendInput(term.pid, new TextEncoder().encode('exit\n'))
const res = await term.wait()
assert.equal(res.exitCode, 0)

// kill of a pty
const t2 = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
assert.equal(await sbx.pty.kill(t2.pid), true)
console.log('pty ok')
