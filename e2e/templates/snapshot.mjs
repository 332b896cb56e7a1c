// Sandbox snapshots through E2B_API_URL: a snapshot of a running sandbox,
// a sandbox created from it sees a file and a process of the source, the
// source keeps running, list and delete. Exits non-zero on the first
// failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }

const src = await Sandbox.create('base', { timeoutMs: 120_000 })
await src.files.write('/home/user/snap.txt', 'from the source')
await src.commands.run('sleep 777', { background: true })

const snap = await Sandbox.createSnapshot(src.sandboxId, { name: 'e2e-snap' })
check(snap.snapshotId === 'e2e-snap:default', `snapshot ${JSON.stringify(snap)}`)
check(await src.isRunning(), 'the source stopped after the snapshot')
const s = await src.commands.run('cat /home/user/snap.txt')
check(s.stdout === 'from the source', `source after snapshot: ${JSON.stringify(s.stdout)}`)

const list = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
check(list.length === 1 && list[0].snapshotId === snap.snapshotId, `listSnapshots ${JSON.stringify(list)}`)

const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
check(copy.sandboxId !== src.sandboxId, 'same sandbox')
const r = await copy.commands.run('cat /home/user/snap.txt; echo; pgrep -f "sleep 777" >/dev/null && echo alive')
check(r.stdout === 'from the source\nalive\n', `copy sees ${JSON.stringify(r.stdout)}`)
// The copy is a sandbox of its own.
await copy.files.write('/home/user/snap.txt', 'changed in the copy')
const s2 = await src.commands.run('cat /home/user/snap.txt')
check(s2.stdout === 'from the source', `source sees the copy's write: ${JSON.stringify(s2.stdout)}`)

await copy.kill()
check(await Sandbox.deleteSnapshot(snap.snapshotId), 'deleteSnapshot returned false')
check(!(await Sandbox.deleteSnapshot(snap.snapshotId)), 'second deleteSnapshot did not return false')
const after = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
check(after.length === 0, `listSnapshots after delete ${JSON.stringify(after)}`)
await src.kill()
console.log('OK')
