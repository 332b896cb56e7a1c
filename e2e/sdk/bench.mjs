// Create → first command through the SDK, N times (argv[2], default 10),
// waiting argv[3] milliseconds (default 0) between iterations, untimed
// (time for a warm pool to refill, as between a user's creates).
// Prints one JSON line: {"ms":[...],"createMs":[...],"runMs":[...]} with
// each iteration's milliseconds: the whole, Sandbox.create alone, and the
// first commands.run alone.
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] || 10)
const gap = Number(process.argv[3] || 0)
const ms = []
const createMs = []
const runMs = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create('base', { timeoutMs: 60_000 })
  const t1 = performance.now()
  const r = await sbx.commands.run('true')
  const t2 = performance.now()
  ms.push(t2 - t0)
  createMs.push(t1 - t0)
  runMs.push(t2 - t1)
  if (r.exitCode !== 0) { console.error('command failed'); process.exit(1) }
  await sbx.kill()
  if (gap > 0) await new Promise((resolve) => setTimeout(resolve, gap))
}
console.log(JSON.stringify({ ms, createMs, runMs }))
