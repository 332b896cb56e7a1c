// How a sandbox answers the SDK during a fork bomb, N times (argv[2],
// default 3), each in a sandbox of its own: ten of root's sleeps, the bomb
// as the default user (commands.run('bash -c ":(){ :|:& };:"', {background:
// true}), as issue 26 starts it), 10 s of it, then 10 rounds of
// commands.list(), commands.kill() of one of the sleeps and
// commands.run('echo rootok', {user: 'root'}), each timed; then the bomb's
// handle.kill(), timed until the default user's `echo alive` answers
// (recover). A call that fails counts as its deadline (30 s). Prints one
// JSON line: {"list":[ms...],"kill":[...],"root":[...],"recover":[...],
// "failed":n}.
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] || 3)
const deadline = 30_000
const t = { timeoutMs: deadline, requestTimeoutMs: deadline }
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const out = { list: [], kill: [], root: [], recover: [], failed: 0 }

// timed runs fn and adds its milliseconds to out[what] (the deadline when
// it failed or check refused its result).
async function timed (what, fn, check) {
  const t0 = performance.now()
  try {
    const r = await fn()
    if (!check(r)) throw new Error(`unexpected result ${JSON.stringify(r)}`)
    out[what].push(performance.now() - t0)
  } catch (e) {
    console.error(`${what} during the bomb: ${e.message}`)
    out.failed++
    out[what].push(deadline)
  }
}

for (let i = 0; i < n; i++) {
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
  try {
    const victims = []
    for (let j = 0; j < 10; j++) {
      victims.push(await sbx.commands.run('sleep 600', { ...t, background: true, user: 'root' }))
    }
    const bomb = await sbx.commands.run('bash -c ":(){ :|:& };:"', { ...t, background: true })
    await sleep(10_000) // the bomb's run-up, not a wait for a result
    for (const v of victims) {
      await timed('list', () => sbx.commands.list(t), (l) => Array.isArray(l))
      await timed('kill', () => sbx.commands.kill(v.pid, t), (r) => r === true)
      await timed('root', () => sbx.commands.run('echo rootok', { ...t, user: 'root' }), (r) => r.stdout === 'rootok\n')
    }
    const t0 = performance.now()
    await bomb.kill()
    for (;;) {
      try {
        const r = await sbx.commands.run('echo alive', t)
        if (r.stdout === 'alive\n') break
      } catch (e) {
        if (performance.now() - t0 > 300_000) throw new Error(`the default user after the bomb's kill: ${e.message}`)
      }
      await sleep(100)
    }
    out.recover.push(performance.now() - t0)
  } finally {
    await sbx.kill()
  }
}
console.log(JSON.stringify(out))
