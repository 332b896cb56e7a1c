// Auto-resume on HTTP traffic and isRunning() on a paused sandbox, through
// the real SDK. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sandboxUrl = process.env.E2B_SANDBOX_URL

const sbx = await Sandbox.create('base', { lifecycle: { onTimeout: 'pause', autoResume: true }, timeoutMs: 120_000 })
await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html && cd /tmp/www && python3 -m http.server 8000 >/dev/null 2>&1', { background: true })
const get = () => fetch(sandboxUrl + '/index.html', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
for (let i = 0; ; i++) {
  const r = await get()
  if (r.status === 200) break
  await r.text()
  check(i < 100, 'server did not answer before the pause')
  await new Promise((res) => setTimeout(res, 100))
}
for (let round = 0; round < 5; round++) {
  check(await sbx.pause(), 'pause returned false')
  const r = await get() // this request wakes it
  const body = await r.text()
  check(r.status === 200 && body === 'served\n', `round ${round}: waking request: ${r.status} ${body}`)
  const info = await sbx.getInfo()
  check(info.state === 'running', `round ${round}: state after wake ${info.state}`)
}
await sbx.kill()
console.log('auto-resume ok')

// A paused sandbox without auto-resume is "not running", not an error.
const plain = await Sandbox.create('base', { lifecycle: { onTimeout: 'pause' }, timeoutMs: 120_000 })
check(await plain.pause(), 'pause returned false')
check((await plain.isRunning()) === false, 'isRunning() of a paused sandbox is not false')
await plain.kill()
console.log('paused isRunning ok')

console.log('OK')
