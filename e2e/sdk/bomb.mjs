// A fork bomb as a new user of the SDK starts one, against `warren serve`:
// root's command answers during it, the bomb's handle.kill() ends every
// process it made, the default user's echo works again, and
// commands.kill(0) resets the default user's processes (here a second
// bomb, in a session of its own). Every call has a deadline; the sandbox
// is killed at the end whatever happens. Exits non-zero on the first
// failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exitCode = 1; throw new Error(msg) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const t = { timeoutMs: 60_000, requestTimeoutMs: 60_000 }

// waitUntil polls fn (each call bounded by t) until it returns true.
async function waitUntil (what, fn, limitMs = 120_000) {
  const end = Date.now() + limitMs
  for (;;) {
    try { if (await fn()) return } catch (e) { console.log(`${what}: ${e.message}`) }
    if (Date.now() > end) fail(`${what}: not within ${limitMs} ms`)
    await sleep(500)
  }
}
const userProcesses = async (sbx) => {
  const r = await sbx.commands.run('pgrep -c -u user || true', { ...t, user: 'root' })
  return Number(r.stdout.trim())
}

const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
console.log('created', sbx.sandboxId)
try {
  const bomb = await sbx.commands.run('bash -c ":(){ :|:& };:" 2>/dev/null', { background: true, ...t })
  await waitUntil('the bomb at half the task limit', async () => (await userProcesses(sbx)) >= 256)
  const root = await sbx.commands.run('echo rootok', { ...t, user: 'root' })
  check(root.stdout === 'rootok\n', `root during the bomb: ${JSON.stringify(root.stdout)}`)
  check(await bomb.kill() === true, 'handle.kill() of the bomb returned false')
  await waitUntil('no process of the default user after the kill', async () => (await userProcesses(sbx)) === 0)
  const echo = await sbx.commands.run('echo alive', t)
  check(echo.stdout === 'alive\n', `the default user after the kill: ${JSON.stringify(echo.stdout)}`)
  check(await bomb.kill() === false, 'a second kill of the bomb found something')

  await sbx.commands.run('setsid bash -c ":(){ :|:& };:" 2>/dev/null & sleep 600', { background: true, ...t })
  await waitUntil('the second bomb at half the task limit', async () => (await userProcesses(sbx)) >= 256)
  check(await sbx.commands.kill(0, t) === true, 'commands.kill(0) returned false')
  await waitUntil('no process of the default user after kill(0)', async () => (await userProcesses(sbx)) === 0)
  check((await sbx.commands.run('echo alive', t)).stdout === 'alive\n', 'the default user after kill(0)')
  check(await sbx.commands.kill(0, t) === false, 'kill(0) with nothing left returned true')
  console.log('OK')
} finally {
  await sbx.kill()
}
