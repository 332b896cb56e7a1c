// The SDK flow a new user follows (create, run, files, kill), run against `warren serve` through E2B_API_URL
// and E2B_SANDBOX_URL (not debug mode). Exits non-zero on the first
// failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const testId = 'test-' + Math.random().toString(36).slice(2, 10)

const sbx = await Sandbox.create('base', { metadata: { sandboxTestId: testId, 'key one': 'v&1=x' }, timeoutMs: 120_000 })
console.log('created', sbx.sandboxId)

const r = await sbx.commands.run('echo hello; whoami')
check(r.exitCode === 0 && r.stdout === 'hello\nuser\n', `commands.run stdout ${JSON.stringify(r.stdout)}`)

await sbx.files.write('/home/user/a.txt', 'warren data')
check((await sbx.files.read('/home/user/a.txt')) === 'warren data', 'files.read')
const entries = await sbx.files.list('/home/user')
check(entries.some((e) => e.name === 'a.txt'), 'files.list lacks a.txt')

const page = await Sandbox.list({ query: { metadata: { sandboxTestId: testId, 'key one': 'v&1=x' } } }).nextItems()
check(page.length === 1 && page[0].sandboxId === sbx.sandboxId, `list by metadata: ${JSON.stringify(page)}`)
const none = await Sandbox.list({ query: { metadata: { sandboxTestId: 'nope-' + testId } } }).nextItems()
check(none.length === 0, 'list by other metadata is not empty')

const info = await sbx.getInfo()
check(info.sandboxId === sbx.sandboxId && info.state === 'running' && info.metadata.sandboxTestId === testId, `getInfo ${JSON.stringify(info)}`)

await sbx.setTimeout(5_000)
check(await sbx.isRunning(), 'not running right after setTimeout')
await sleep(8_000)
check(!(await sbx.isRunning()), 'still running 8 s after setTimeout(5 s)')
console.log('timeout ok')

const p = await Sandbox.create('base', { lifecycle: { onTimeout: 'pause' }, timeoutMs: 120_000 })
await p.commands.run('sleep 600', { background: true })
await p.files.write('/home/user/keep.txt', 'kept')
check(await p.pause(), 'pause returned false')
check(!(await p.pause()), 'second pause did not return false')
const again = await Sandbox.connect(p.sandboxId, { timeoutMs: 60_000 })
const ps = await again.commands.run('pgrep -f "sleep 600" >/dev/null && echo alive; cat /home/user/keep.txt')
check(ps.stdout === 'alive\nkept', `after resume: ${JSON.stringify(ps.stdout)}`)
console.log('pause/connect ok')

check(await again.kill(), 'kill returned false')
check(!(await Sandbox.kill(p.sandboxId)), 'second kill did not return false')
check(!(await again.isRunning()), 'killed sandbox still running')
console.log('OK')
