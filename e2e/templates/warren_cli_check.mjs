// A sandbox of the template that `warren template build` built (name in
// argv[2]), through the real E2B SDK: the copied files, the RUN steps'
// output (as root, then as USER user), the ENV values in every process,
// the WORKDIR and USER as the sandbox's defaults, and the running start
// command. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const name = process.argv[2]

const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
try {
  const r = await sbx.commands.run([
    'cat /opt/app/hello.txt /opt/app/sub/deep.txt /opt/app/greeting.txt /opt/app/builder.txt /home/user/who.txt',
    'echo "$GREETING $APPDIR"',
    'pwd', 'id -un',
    'cat /home/user/started',
    'pgrep -f "^sleep 86400$" >/dev/null && echo start-command-running',
  ].join('; '))
  check(r.exitCode === 0, `command exit ${r.exitCode}: ${r.stderr}`)
  const want = [
    'hello', 'deep', 'hi warren', 'root', 'user',
    'hi /opt/app',
    '/opt/app', 'user',
    'started with hi',
    'start-command-running',
    '',
  ].join('\n')
  check(r.stdout === want, `sandbox sees ${JSON.stringify(r.stdout)}, want ${JSON.stringify(want)}`)
  check(!(await sbx.files.exists('/opt/app/sub/skip.log')), 'a file of .dockerignore reached the template')
} finally {
  await sbx.kill()
}
console.log('OK')
