// Commands through the real E2B SDK in debug mode (envd on localhost:49983).
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'

const dir = process.env.WORK_DIR
const sbx = await Sandbox.create()

// stdout, stderr, exit code
const r = await sbx.commands.run('echo hi; echo err >&2')
assert.equal(r.stdout, 'hi\n')
assert.equal(r.stderr, 'err\n')
assert.equal(r.exitCode, 0)

// a failing command throws CommandExitError with its output
await assert.rejects(sbx.commands.run('echo out; echo bad >&2; exit 3'), (e) => {
  assert.ok(e instanceof CommandExitError, `not a CommandExitError: ${e}`)
  assert.equal(e.exitCode, 3)
  assert.equal(e.stdout, 'out\n')
  assert.equal(e.stderr, 'bad\n')
  return true
})

// envs and cwd
const r2 = await sbx.commands.run('echo $FOO; pwd', { envs: { FOO: 'bar' }, cwd: dir })
assert.equal(r2.stdout, `bar\n${dir}\n`)

// streaming callbacks
let streamed = ''
await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: (d) => { streamed += d } })
assert.equal(streamed, '1\n2\n3\n')

// background + connect + sendStdin + kill
const h = await sbx.commands.run('cat', { background: true, stdin: true })
assert.ok(h.pid > 0)
const listed = await sbx.commands.list()
assert.ok(listed.some((p) => p.pid === h.pid), 'background process not listed')
let out = ''
let gotPing
const pinged = new Promise((resolve) => { gotPing = resolve })
const attached = await sbx.commands.connect(h.pid, {
  onStdout: (d) => { out += d; if (out.includes('ping')) gotPing() },
})
await sbx.commands.sendStdin(h.pid, 'ping\n')
await pinged
assert.equal(await sbx.commands.kill(h.pid), true)
await assert.rejects(attached.wait(), (e) => e instanceof CommandExitError)
assert.equal(await sbx.commands.kill(h.pid), false)
assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'killed process still listed')

// closeStdin ends a reader
const c = await sbx.commands.run('cat', { background: true, stdin: true })
await c.sendStdin('to-eof')
await c.closeStdin()
const cr = await c.wait()
assert.equal(cr.stdout, 'to-eof')

// disconnecting from a background command does not kill it
const bg = await sbx.commands.run('sleep 30', { background: true })
await bg.disconnect()
assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'disconnect killed the process')
assert.equal(await sbx.commands.kill(bg.pid), true)

console.log('commands ok')

// envd is PID 1 here: orphans it inherits are reaped (no zombies linger)
// while the exit codes of its own processes stay right.
assert.equal((await sbx.commands.run('cat /proc/1/comm')).stdout, 'envd\n')
for (let i = 0; i < 5; i++) {
  const o = await sbx.commands.run('for i in 1 2 3 4 5; do (sleep 0.01 &) ; done; exit 4').catch((e) => e)
  assert.equal(o.exitCode, 4)
}
let zombies = -1
for (let i = 0; i < 200 && zombies !== 0; i++) {
  const z = await sbx.commands.run("sleep 0.05; grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
  zombies = Number(z.stdout.trim())
}
assert.equal(zombies, 0, 'zombies are not reaped')
console.log('pid 1 ok')
