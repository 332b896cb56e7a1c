// What `e2b template create --no-cache` means to send: the CLI's own
// translation of cli/e2b.Dockerfile (Template().fromDockerfile) with the
// same start and ready commands, built with skipCache (force: true). CLI
// 2.19.0 drops its --no-cache flag before the request, so this is how the
// test sees Warren honour force. Prints the build's log messages; exits
// non-zero when the build fails.
import { Template, defaultBuildLogger } from 'e2b'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const name = process.argv[2]
const ctx = path.join(path.dirname(fileURLToPath(import.meta.url)), 'cli')
const tpl = Template({ fileContextPath: ctx })
  .fromDockerfile(path.join(ctx, 'e2b.Dockerfile'))
  .setStartCmd('/opt/app/start.sh', 'test -s /tmp/started')
await Template.build(tpl, name, { skipCache: true, cpuCount: 1, memoryMB: 512, onBuildLogs: defaultBuildLogger() })
console.log('OK')
