// E2B's Volume API through the unmodified SDK against `warren serve`
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_VOLUME_API_URL): the volume calls,
// the content calls without a sandbox, two sandboxes sharing a volume,
// the size limit inside (ENOSPC) and outside (413), escapes from inside a
// sandbox and through the content API, a pause and a snapshot with a
// volume, destroy while in use, and another team's attempts
// (E2B_API_KEY2). The server runs with --max-volume-size-mb 32
// --max-volumes 4. Exits non-zero on the first failed check.
import { createHash } from 'node:crypto'
import { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, AuthenticationError, RateLimitError } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const other = { apiKey: process.env.E2B_API_KEY2 }
check(other.apiKey, 'E2B_API_KEY2 is not set')

// rejects runs fn and returns what it threw (fails when it did not).
async function rejects(fn, what) {
  try {
    await fn()
  } catch (e) {
    return e
  }
  fail(what + ' did not fail')
}

// The Volume API.
const vol = await Volume.create('shared')
check(vol.volumeId && vol.name === 'shared' && vol.token.startsWith('wvt_'), `create: ${JSON.stringify(vol)}`)
const info = await Volume.getInfo(vol.volumeId)
check(info.volumeId === vol.volumeId && info.name === 'shared' && info.token === vol.token, `getInfo: ${JSON.stringify(info)}`)
const conn = await Volume.connect(vol.volumeId)
check(conn.name === 'shared' && conn.token === vol.token, 'connect')
check((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === 'shared'), 'list lacks the volume')
let e = await rejects(() => Volume.create('shared'), 'a second volume of one name')
check(e instanceof VolumeError && e.message.includes('409'), `duplicate name: ${e}`)
console.log('volume api ok')

// The content API, without a sandbox.
e = await vol.makeDir('/dir/sub', { force: true })
check(e.type === 'directory' && e.path === '/dir/sub', `makeDir: ${JSON.stringify(e)}`)
e = await vol.writeFile('/dir/sub/a.txt', 'hello', { mode: 0o640 })
check(e.size === 5 && e.type === 'file' && e.mode === 0o640 && e.mtime instanceof Date, `writeFile: ${JSON.stringify(e)}`)
check((await vol.readFile('/dir/sub/a.txt')) === 'hello', 'readFile text')
const bytes = await vol.readFile('/dir/sub/a.txt', { format: 'bytes' })
check(Buffer.from(bytes).toString() === 'hello', 'readFile bytes')
check(await conn.exists('/dir/sub/a.txt'), 'exists') // the connected instance carries the token too
check(!(await vol.exists('/dir/nope')), 'exists of a missing path')
e = await vol.getInfo('/dir/sub/a.txt')
check(e.name === 'a.txt' && e.uid === 1000, `getInfo of a file: ${JSON.stringify(e)}`)
e = await vol.updateMetadata('/dir/sub/a.txt', { mode: 0o600 })
check(e.mode === 0o600, `updateMetadata: ${JSON.stringify(e)}`)
e = await rejects(() => vol.writeFile('/dir/sub/a.txt', 'again'), 'a write over a file without force')
check(e instanceof VolumeError && e.message.includes('409'), `write without force: ${e}`)
await vol.writeFile('/dir/sub/a.txt', 'again', { force: true })
check((await vol.readFile('/dir/sub/a.txt')) === 'again', 'forced write')
const listed = await vol.list('/', { depth: 3 })
check(['/dir', '/dir/sub', '/dir/sub/a.txt'].every((p) => listed.some((x) => x.path === p)), `list: ${listed.map((x) => x.path)}`)
// Streamed both ways: 12 MiB written from a ReadableStream, read back as a stream.
const chunk = Buffer.alloc(1 << 20, 7)
let n = 0
const src = new ReadableStream({ pull(c) { if (n++ < 12) c.enqueue(new Uint8Array(chunk)); else c.close() } })
e = await vol.writeFile('/big.bin', src)
check(e.size === 12 << 20, `streamed write: ${e.size}`)
const h = createHash('sha256')
let got = 0
for await (const part of await vol.readFile('/big.bin', { format: 'stream' })) { h.update(part); got += part.length }
const want = createHash('sha256')
for (let i = 0; i < 12; i++) want.update(chunk)
check(got === 12 << 20 && h.digest('hex') === want.digest('hex'), `streamed read: ${got} bytes`)
await vol.remove('/big.bin')
await vol.remove('/dir')
check(!(await vol.exists('/dir')), 'remove')
e = await rejects(() => vol.remove('/dir'), 'remove of a missing path')
check(e instanceof VolumePathNotFoundError, `remove missing: ${e}`)
console.log('content api ok')

// Two sandboxes share the volume (by object and by name).
const a = await Sandbox.create('base', { volumeMounts: { '/mnt/data': vol }, timeoutMs: 300_000 })
const b = await Sandbox.create('base', { volumeMounts: { '/mnt/data': 'shared' }, timeoutMs: 300_000 })
await a.files.write('/mnt/data/from-a', 'A')
check((await b.files.read('/mnt/data/from-a')) === 'A', 'b reads a\'s write')
await b.commands.run('echo B > /mnt/data/from-b')
check((await a.commands.run('cat /mnt/data/from-b; stat -c %U /mnt/data/from-b')).stdout === 'B\nuser\n', 'a reads b\'s write, by user')
check((await vol.readFile('/from-b')) === 'B\n', 'the content API reads b\'s write')
await vol.writeFile('/from-api', 'API')
check((await b.commands.run('cat /mnt/data/from-api')).stdout === 'API', 'b reads the content API\'s write')
const mounts = (await a.getInfo()).volumeMounts
check(mounts.length === 1 && mounts[0].name === 'shared' && mounts[0].path === '/mnt/data', `getInfo volumeMounts: ${JSON.stringify(mounts)}`)
console.log('shared ok')

// The size limit: ENOSPC inside, 413 outside.
e = await rejects(() => a.commands.run('dd if=/dev/zero of=/mnt/data/fill bs=1M count=128 2>&1'), 'a write past the volume size in a sandbox')
check(`${e.stdout}${e.stderr}`.includes('No space left on device'), `ENOSPC inside: ${e}`)
await a.commands.run('rm -f /mnt/data/fill')
e = await rejects(() => vol.writeFile('/fill', new Uint8Array(128 << 20)), 'a write past the volume size through the API')
check(e instanceof VolumeError && e.message.includes('413'), `413 outside: ${e}`)
check(!(await vol.exists('/fill')), 'a write that did not fit left a file')
console.log('size limits ok')

// Escapes: links and .. in the volume resolve in the sandbox, and inside
// the volume through the content API.
await a.commands.run('ln -s /etc /mnt/data/etc-link; ln -s ../../../../../etc/passwd /mnt/data/up-link')
check((await a.commands.run('cat /mnt/data/etc-link/hostname')).stdout.trim() === 'e2b.local', 'a link in the volume resolves in the sandbox')
for (const p of ['etc-link/hostname', 'up-link', '../../../../etc/passwd', '/../../etc/hostname']) {
  e = await rejects(() => vol.readFile(p), `read ${p} through the content API`)
  check(e instanceof VolumePathNotFoundError, `read ${p}: ${e}`)
}
e = await rejects(() => vol.writeFile('etc-link/planted', 'x'), 'a write through a link out')
check(e instanceof VolumePathNotFoundError, `write through a link: ${e}`)
console.log('escapes ok')

// A volume in use is not destroyed.
e = await rejects(() => Volume.destroy(vol.volumeId), 'destroy of a volume in use')
check(e instanceof VolumeError && e.message.includes('409'), `destroy in use: ${e}`)

// Pause and resume: the volume is mounted again, as it is now.
await b.commands.run('echo before > /mnt/data/p; echo mem > /tmp/mem')
check(await b.pause(), 'pause')
await a.commands.run('echo during > /mnt/data/p')
const b2 = await Sandbox.connect(b.sandboxId)
check((await b2.commands.run('cat /mnt/data/p /tmp/mem')).stdout === 'during\nmem\n', 'after resume')
console.log('pause ok')

// A snapshot of a sandbox with a volume holds no volume: its sandboxes
// mount one at the same path.
const snap = await a.createSnapshot()
e = await rejects(() => Sandbox.create(snap.snapshotId), 'a create from the snapshot without its volume')
check(e.message.includes('/mnt/data'), `create from a snapshot without volumes: ${e}`)
const c = await Sandbox.create(snap.snapshotId, { volumeMounts: { '/mnt/data': vol }, timeoutMs: 120_000 })
check((await c.commands.run('cat /mnt/data/p')).stdout === 'during\n', 'the snapshot\'s sandbox sees the volume as it is')
await c.kill()
console.log('snapshot ok')

await a.kill()
await b2.kill()
check(await Volume.destroy(vol.volumeId), 'destroy')
check(!(await Volume.destroy(vol.volumeId)), 'second destroy')
e = await rejects(() => Volume.getInfo(vol.volumeId), 'getInfo of a destroyed volume')
check(e instanceof VolumeNotFoundError, `getInfo after destroy: ${e}`)

// Another team: no access, and names are per team.
const mine = await Volume.create('mine')
e = await rejects(() => Volume.connect(mine.volumeId, other), 'another team connects')
check(e instanceof VolumeNotFoundError, `connect by another team: ${e}`)
check(!(await Volume.destroy(mine.volumeId, other)), 'another team destroys')
e = await rejects(() => Sandbox.create('base', { ...other, volumeMounts: { '/mnt': 'mine' } }), 'another team mounts the volume')
check(e.message.includes("doesn't exist"), `mount by another team: ${e}`)
const theirs = await Volume.create('mine', other)
check(theirs.volumeId !== mine.volumeId, 'the other team\'s volume of the same name')
await theirs.writeFile('/t', 'theirs')
const forged = new Volume(mine.volumeId, 'mine', theirs.token)
e = await rejects(() => forged.readFile('/t'), 'another volume\'s token')
check(e instanceof AuthenticationError, `another volume's token: ${e}`)
check(!(await Volume.list(other)).some((v) => v.volumeId === mine.volumeId), 'another team lists the volume')

// The team's count limit.
await Volume.create('v2')
await Volume.create('v3')
await Volume.create('v4')
e = await rejects(() => Volume.create('v5'), 'a fifth volume')
check(e instanceof RateLimitError && e.message.includes('maximum number of volumes'), `count limit: ${e}`)
console.log('OK')
