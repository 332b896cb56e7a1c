// A sandbox of the template that `e2b template create` built from
// cli/e2b.Dockerfile (name in argv[2]): the copied files, the RUN's output,
// the ENV/ARG values, the WORKDIR, the default user and the running start
// command. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const name = process.argv[2]

const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
try {
  const r = await sbx.commands.run([
    'cat /opt/app/hello.txt /opt/note.txt /opt/app/run.txt',
    'echo "$GREETING $SECOND $THIRD $BUILD_ONLY"',
    'stat -c %U:%G /opt/note.txt /opt/app/hello.txt',
    'pwd', 'id -un', 'cat /tmp/started',
    'pgrep -f "sleep 86400" >/dev/null && echo start-command-running',
  ].join('; '))
  check(r.exitCode === 0, `command exit ${r.exitCode}: ${r.stderr}`)
  const want = [
    "hello from the CLI's build context",
    'a single copied file',
    'built-by-run arg-value as root in /opt/app',
    'hello-cli two three arg-value',
    'user:user',
    'root:root',
    '/opt/app',
    'user',
    'started in /opt/app as user with hello-cli',
    'start-command-running',
    '',
  ].join('\n')
  check(r.stdout === want, `sandbox sees ${JSON.stringify(r.stdout)}, want ${JSON.stringify(want)}`)
} finally {
  await sbx.kill()
}
console.log('OK')
