// getMetrics() through the real E2B SDK against `warren serve`: samples
// arrive within 30 s of the create. Exits non-zero on the first failed
// check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
const created = Date.now()
console.log('created', sbx.sandboxId)
await sbx.commands.run('head -c 50000000 /dev/zero > /home/user/blob')

let metrics = []
while (Date.now() - created < 30_000) {
  metrics = await sbx.getMetrics()
  if (metrics.length > 0) break
  await sleep(1_000)
}
const took = Date.now() - created
check(metrics.length > 0, `getMetrics() returned no samples within 30 s of create`)
console.log(`first samples after ${took} ms:`, JSON.stringify(metrics))
const m = metrics[metrics.length - 1]
check(m.timestamp instanceof Date && !isNaN(m.timestamp), `timestamp ${m.timestamp}`)
check(m.cpuCount > 0, `cpuCount ${m.cpuCount}`)
check(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, `memory ${m.memUsed}/${m.memTotal}`)
check(m.diskTotal > 0 && m.diskUsed >= 0, `disk ${m.diskUsed}/${m.diskTotal}`)
check(typeof m.cpuUsedPct === 'number' && m.cpuUsedPct >= 0, `cpuUsedPct ${m.cpuUsedPct}`)

// The static form, and a window that excludes every sample.
const again = await Sandbox.getMetrics(sbx.sandboxId)
check(again.length >= metrics.length, `static getMetrics returned ${again.length} samples`)
const none = await sbx.getMetrics({ start: new Date(created - 3_600_000), end: new Date(created - 1_800_000) })
check(none.length === 0, `window before the create returned ${none.length} samples`)

await sbx.kill()
console.log('OK')
