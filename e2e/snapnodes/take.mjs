// Takes a snapshot of a new sandbox of base through E2B_API_URL with the
// real SDK: a file on its disk, a file in its /tmp (memory) and a process
// running; prints {"sandboxId", "snapshotId", "tookMs"} and leaves the
// source running. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }

const name = process.argv[2]
const src = await Sandbox.create('base', { timeoutMs: 600_000 })
await src.files.write('/home/user/snap.txt', 'from the source')
await src.commands.run('echo in-memory > /tmp/mem.txt')
await src.commands.run('sleep 777', { background: true })

const begin = Date.now()
// The first snapshot of a template's sandbox on a node writes that
// template's root filesystem artifact: give it time on a loaded machine.
const snap = await Sandbox.createSnapshot(src.sandboxId, { name, requestTimeoutMs: 600_000 })
const tookMs = Date.now() - begin
check(snap.snapshotId === `${name}:default`, `snapshot ${JSON.stringify(snap)}`)
check(await src.isRunning(), 'the source stopped after the snapshot')
const s = await src.commands.run('cat /home/user/snap.txt')
check(s.stdout === 'from the source', `source after the snapshot: ${JSON.stringify(s.stdout)}`)
const list = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
check(list.length === 1 && list[0].snapshotId === snap.snapshotId, `listSnapshots ${JSON.stringify(list)}`)
console.log(JSON.stringify({ sandboxId: src.sandboxId, snapshotId: snap.snapshotId, tookMs }))
