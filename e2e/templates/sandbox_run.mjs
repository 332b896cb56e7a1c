// Creates a sandbox of the template in argv[2], runs the shell command in
// argv[3] in it and prints `exit N` and the command's stdout; kills the
// sandbox. Exits non-zero only when the SDK calls fail.
import { Sandbox, CommandExitError } from 'e2b'

const [name, cmd] = process.argv.slice(2)
const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
try {
  let r
  try {
    r = await sbx.commands.run(cmd)
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    r = e
  }
  process.stdout.write(`exit ${r.exitCode}\n${r.stdout}`)
} finally {
  await sbx.kill()
}
