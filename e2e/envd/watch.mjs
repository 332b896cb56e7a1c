// watchDir events through the real E2B SDK in debug mode.
import assert from 'node:assert/strict'
import { Sandbox, FilesystemEventType } from 'e2b'

const dir = process.env.WORK_DIR
const sbx = await Sandbox.create()
const events = []
let done
const finished = new Promise((resolve) => { done = resolve })
const handle = await sbx.files.watchDir(dir, (e) => {
  events.push(e)
  if (e.type === FilesystemEventType.REMOVE && e.name === 'sub/w.txt') done()
}, { recursive: true })
await sbx.files.makeDir(`${dir}/sub`)
await sbx.files.write(`${dir}/sub/w.txt`, 'x')
await sbx.files.remove(`${dir}/sub/w.txt`)
await finished
await handle.stop()
const kinds = events.map((e) => `${e.name}:${e.type}`)
assert.ok(kinds.includes(`sub:${FilesystemEventType.CREATE}`), kinds.join(','))
assert.ok(kinds.includes(`sub/w.txt:${FilesystemEventType.WRITE}`), kinds.join(','))
console.log('watch ok')
