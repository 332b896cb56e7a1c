// Template.build() through E2B_API_URL: COPY, RUN, ENV, a start command
// with a ready command; then a sandbox of the template sees the files,
// the environment and the running start command. Exits non-zero on the
// first failed check.
import { Template, Sandbox, waitForFile, defaultBuildLogger } from 'e2b'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const name = process.argv[2]

const tpl = Template({ fileContextPath: path.join(path.dirname(fileURLToPath(import.meta.url)), 'ctx') })
  .fromBaseImage()
  .copy('app', '/opt/app')
  .runCmd('chmod +x /opt/app/start.sh && echo built-by-run > /opt/app/run.txt')
  .setEnvs({ GREETING: 'hello-warren', SECOND: 'two', PATH: '/opt/app:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' })
  .setStartCmd('/opt/app/start.sh', waitForFile('/tmp/started'))

const logs = []
const info = await Template.build(tpl, name, { onBuildLogs: (e) => { logs.push(e); defaultBuildLogger()(e) } })
check(info.templateId && info.buildId, `build info ${JSON.stringify(info)}`)
check(logs.length > 0, 'no build logs')
check(await Template.exists(name), 'Template.exists is false after the build')
check(!(await Template.exists(name + '-nope')), 'Template.exists is true for an unknown name')
console.log('built', info.templateId)

const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
const r = await sbx.commands.run('cat /opt/app/hello.txt /opt/app/run.txt; echo "$GREETING $SECOND"; cat /tmp/started; pgrep -f "sleep infinity" >/dev/null && echo running')
check(r.exitCode === 0, `command exit ${r.exitCode}`)
check(r.stdout === 'hello from the build context\nbuilt-by-run\nhello-warren two\nstarted with hello-warren\nrunning\n', `sandbox sees ${JSON.stringify(r.stdout)}`)
// The template's PATH reaches the SDK's login shell (the base template's
// /etc/profile keeps it): start.sh in /opt/app is found by name.
const p = await sbx.commands.run('echo "$PATH"; command -v start.sh')
check(p.stdout === '/opt/app:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n/opt/app/start.sh\n', `PATH in the sandbox ${JSON.stringify(p.stdout)}`)
const info2 = await sbx.getInfo()
check(info2.templateId === info.templateId, `getInfo templateId ${info2.templateId}`)
await sbx.kill()

// A second build of the same template hits the layer cache.
const again = []
await Template.build(tpl, name, { onBuildLogs: (e) => again.push(e.message) })
check(again.some((m) => /cache/i.test(m)), `second build shows no cache hit: ${JSON.stringify(again)}`)
console.log('OK')
