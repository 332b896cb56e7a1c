// Files through the real E2B SDK in debug mode.
import assert from 'node:assert/strict'
import { Sandbox, FileType, FileNotFoundError } from 'e2b'

const dir = process.env.WORK_DIR
const sbx = await Sandbox.create()

// write / read
const info = await sbx.files.write(`${dir}/a/b.txt`, 'hello')
assert.equal(info.path, `${dir}/a/b.txt`)
assert.equal(info.name, 'b.txt')
assert.equal(await sbx.files.read(`${dir}/a/b.txt`), 'hello')
const bytes = await sbx.files.read(`${dir}/a/b.txt`, { format: 'bytes' })
assert.deepEqual(Array.from(bytes), Array.from(new TextEncoder().encode('hello')))

// octet-stream and gzip uploads
await sbx.files.write(`${dir}/raw.txt`, 'raw body', { useOctetStream: true })
assert.equal(await sbx.files.read(`${dir}/raw.txt`), 'raw body')
await sbx.files.write(`${dir}/gz.txt`, 'zipped body', { gzip: true })
assert.equal(await sbx.files.read(`${dir}/gz.txt`, { gzip: true }), 'zipped body')

// multi-file write
const many = await sbx.files.write([
  { path: `${dir}/m/1.txt`, data: 'one' },
  { path: `${dir}/m/2.txt`, data: 'two' },
])
assert.equal(many.length, 2)
assert.equal(await sbx.files.read(`${dir}/m/2.txt`), 'two')

// list / exists / getInfo
const entries = await sbx.files.list(`${dir}/m`)
assert.deepEqual(entries.map((e) => e.name).sort(), ['1.txt', '2.txt'])
assert.equal(entries[0].type, FileType.FILE)
assert.equal(await sbx.files.exists(`${dir}/m/1.txt`), true)
assert.equal(await sbx.files.exists(`${dir}/nope`), false)
const fi = await sbx.files.getInfo(`${dir}/a/b.txt`)
assert.equal(fi.size, 5)
assert.equal(fi.type, FileType.FILE)
assert.equal(fi.permissions, '-rw-r--r--')
const di = await sbx.files.getInfo(`${dir}/a`)
assert.equal(di.type, FileType.DIR)

// makeDir: true when created, false when it exists
assert.equal(await sbx.files.makeDir(`${dir}/new/deep`), true)
assert.equal(await sbx.files.makeDir(`${dir}/new/deep`), false)

// rename / remove
const moved = await sbx.files.rename(`${dir}/a/b.txt`, `${dir}/moved.txt`)
assert.equal(moved.path, `${dir}/moved.txt`)
assert.equal(await sbx.files.exists(`${dir}/a/b.txt`), false)
await sbx.files.remove(`${dir}/m`)
assert.equal(await sbx.files.exists(`${dir}/m`), false)

// errors
await assert.rejects(sbx.files.read(`${dir}/missing.txt`), (e) => e instanceof FileNotFoundError)

// metadata (user xattrs; skipped when the filesystem has none)
if (process.env.XATTRS === '1') {
  await sbx.files.write(`${dir}/meta.txt`, 'm', { metadata: { team: 'blue' } })
  const mi = await sbx.files.getInfo(`${dir}/meta.txt`)
  assert.equal(mi.metadata?.team, 'blue')
}
console.log('files ok')
