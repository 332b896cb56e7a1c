// Creates a sandbox from the snapshot named in argv[2] through
// E2B_API_URL with the real SDK and checks that it has the source's file,
// its /tmp (memory) and its process; prints {"sandboxId", "tookMs"} and
// leaves it running. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }

const begin = Date.now()
const copy = await Sandbox.create(process.argv[2], { timeoutMs: 600_000, requestTimeoutMs: 600_000 })
const tookMs = Date.now() - begin
const r = await copy.commands.run('cat /home/user/snap.txt; echo; cat /tmp/mem.txt; pgrep -f "sleep 777" >/dev/null && echo alive')
check(r.stdout === 'from the source\nin-memory\nalive\n', `the copy sees ${JSON.stringify(r.stdout)}`)
// The copy is a sandbox of its own.
await copy.files.write('/home/user/snap.txt', 'changed in the copy')
console.log(JSON.stringify({ sandboxId: copy.sandboxId, tookMs }))
