// SDK calls in E2B's own topology ("domain mode"): HTTPS with a
// throw-away CA trusted through NODE_EXTRA_CA_CERTS, E2B_DOMAIN set to
// e2b.localhost:<port>, and neither E2B_API_URL nor E2B_SANDBOX_URL: the
// SDK reaches https://api.<domain> and each sandbox at
// https://<port>-<id>.<domain> (HTTP/2 by ALPN), names glibc resolves
// to loopback. Exits non-zero on the first failed check.
import { Sandbox, TimeoutError, CommandExitError } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const domain = process.env.E2B_DOMAIN
check(domain && !process.env.E2B_API_URL && !process.env.E2B_SANDBOX_URL, 'not the domain-mode environment')

const sbx = await Sandbox.create('base', { timeoutMs: 300_000 })
console.log('created', sbx.sandboxId)
check(sbx.getHost(8000) === `8000-${sbx.sandboxId}.${domain}`, `getHost ${sbx.getHost(8000)}`)

// commands: a streamed run, and a failing one.
let streamed = ''
const r = await sbx.commands.run('echo hello; whoami; echo err >&2', { onStdout: (d) => { streamed += d } })
check(r.exitCode === 0 && r.stdout === 'hello\nuser\n' && r.stderr === 'err\n' && streamed === r.stdout, `run ${JSON.stringify(r)}`)
const exit3 = await sbx.commands.run('exit 3').catch((e) => e)
check(exit3 instanceof CommandExitError && exit3.exitCode === 3, `exit 3: ${exit3}`)

// files.list: the SDK test's tree, a depth-first walk in lexical order;
// the siblings under many/ are made in reverse, so an unsorted listing
// shows.
const dir = 'test_directory'
const home = '/home/user'
for (const d of ['subdir2/subdir2_2', 'subdir2/subdir2_1', 'subdir1/subdir1_2', 'subdir1/subdir1_1']) {
  check(await sbx.files.makeDir(`${dir}/${d}`), `makeDir ${d}`)
}
await sbx.files.write(`${dir}/file1.txt`, 'Hello, world!')
const depth1 = ['file1.txt', 'subdir1', 'subdir2']
const depth2 = ['file1.txt', 'subdir1', 'subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2', 'subdir2/subdir2_1', 'subdir2/subdir2_2']
for (const [depth, want] of [[undefined, depth1], [1, depth1], [2, depth2], [3, depth2]]) {
  const got = await sbx.files.list(dir, depth === undefined ? undefined : { depth })
  const paths = got.map((e) => e.path)
  const wantPaths = want.map((p) => `${home}/${dir}/${p}`)
  check(JSON.stringify(paths) === JSON.stringify(wantPaths), `list depth ${depth}: ${JSON.stringify(paths)}`)
  check(got.every((e, i) => e.name === want[i].split('/').pop() && e.type === (want[i] === 'file1.txt' ? 'file' : 'dir')), `list depth ${depth} names/types`)
}
const many = Array.from({ length: 20 }, (_, i) => `f${String(i).padStart(2, '0')}`)
await sbx.commands.run(`mkdir many && cd many && touch ${[...many].reverse().join(' ')}`)
const listed = (await sbx.files.list('many')).map((e) => e.name)
check(JSON.stringify(listed) === JSON.stringify(many), `list many: ${JSON.stringify(listed)}`)
const bad = await sbx.files.list(dir, { depth: -1 }).catch((e) => e)
check(bad instanceof Error && bad.message.includes('depth should be at least one'), `depth -1: ${bad}`)
check(await sbx.files.exists(`${dir}/file1.txt`) && !(await sbx.files.exists(`${dir}/nope`)), 'exists')
check((await sbx.files.read(`${dir}/file1.txt`)) === 'Hello, world!', 'read')

// A port of the sandbox's own, over its <port>-<id>.<domain> host.
await sbx.files.write('www/hello.txt', 'from the sandbox')
await sbx.commands.run('cd www && python3 -m http.server 8000', { background: true })
let page
for (const deadline = Date.now() + 60_000; ; await sleep(250)) {
  const res = await fetch(`https://${sbx.getHost(8000)}/hello.txt`).catch((e) => e)
  if (res instanceof Response && res.status === 200) { page = await res.text(); break }
  if (res instanceof Response) await res.body?.cancel()
  check(Date.now() < deadline, `port 8000 never answered: ${res instanceof Response ? res.status : res}`)
}
check(page === 'from the sandbox', `port 8000 page ${JSON.stringify(page)}`)

// Signed upload and download URLs, on the sandbox's envd host.
const up = await sbx.uploadUrl('up/x.txt')
check(up.startsWith(`https://49983-${sbx.sandboxId}.${domain}/files?`) && up.includes('signature='), `uploadUrl ${up}`)
const form = new FormData()
form.append('file', new Blob(['uploaded']), 'x.txt')
const upRes = await fetch(up, { method: 'POST', body: form })
check(upRes.status === 200, `upload ${upRes.status} ${await upRes.text()}`)
check((await sbx.files.read('up/x.txt')) === 'uploaded', 'read the upload')
const down = await sbx.downloadUrl('up/x.txt', { useSignatureExpiration: 120 })
check(down.includes('signature_expiration='), `downloadUrl ${down}`)
const downRes = await fetch(down)
check(downRes.status === 200 && (await downRes.text()) === 'uploaded', `download ${downRes.status}`)
const unsigned = await fetch(down.replace(/signature=[^&]+/, 'signature=v1_nope'))
check(unsigned.status === 401, `bad signature: ${unsigned.status}`)

// pause and connect: memory and files kept.
await sbx.commands.run('sleep 600', { background: true })
check(await sbx.pause(), 'pause returned false')
check(!(await sbx.isRunning()), 'paused sandbox running')
const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
const ps = await again.commands.run('pgrep -f "sleep 600" >/dev/null && echo alive; cat up/x.txt')
check(ps.stdout === 'alive\nuploaded', `after connect: ${JSON.stringify(ps.stdout)}`)
console.log('pause/connect ok')

// Killed while a command runs: the SDK's health check after the stream
// broke hears that the sandbox is gone, and says so.
const cmd = await again.commands.run('sleep 60', { background: true })
check(await again.kill(), 'kill returned false')
const err = await cmd.wait().catch((e) => e)
check(err instanceof TimeoutError, `wait after kill: ${err?.constructor?.name}: ${err?.message}`)
check(err.message.includes('sandbox was killed or reached its end of life'), `wait after kill: ${err.message}`)
check(!(await again.isRunning()), 'killed sandbox running')
check(!(await Sandbox.kill(sbx.sandboxId)), 'second kill did not return false')
console.log('OK')
