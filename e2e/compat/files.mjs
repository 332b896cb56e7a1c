// File writes as the default user, as E2B's envd makes them: as root on
// the user's behalf, anywhere, what is created owned by the user; reads
// keep the user's permissions. Exits non-zero on the first failed check.
import { Sandbox } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }

const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
try {
  const written = await sbx.files.write([
    { path: '/0/a.txt', data: 'a' },
    { path: '/0/deep/b.txt', data: 'b' },
    { path: 'rel/c.txt', data: 'c' },
  ])
  check(written.length === 3 && written[0].path === '/0/a.txt' && written[2].path === '/home/user/rel/c.txt', `write result ${JSON.stringify(written)}`)
  await sbx.files.write('/opt/single.txt', 'single')
  check(await sbx.files.makeDir('/srv/made/sub'), 'makeDir returned false')
  check(!(await sbx.files.makeDir('/srv/made/sub')), 'second makeDir did not return false')
  await sbx.files.write('/srv/made/sub/f.txt', 'f')
  await sbx.files.rename('/srv/made/sub/f.txt', '/var/moved/f.txt')
  await sbx.commands.run('echo r > /tmp/rootfile && chmod 600 /tmp/rootfile', { user: 'root' })
  await sbx.files.remove('/tmp/rootfile')
  check(!(await sbx.files.exists('/tmp/rootfile')), 'removed file still exists')
  const own = await sbx.commands.run('stat -c "%n %U" /0 /0/a.txt /0/deep /0/deep/b.txt /home/user/rel/c.txt /opt/single.txt /srv/made /srv/made/sub /var/moved /var/moved/f.txt /opt /var')
  const want = ['/0 user', '/0/a.txt user', '/0/deep user', '/0/deep/b.txt user', '/home/user/rel/c.txt user', '/opt/single.txt user',
    '/srv/made user', '/srv/made/sub user', '/var/moved user', '/var/moved/f.txt user', '/opt root', '/var root'].join('\n') + '\n'
  check(own.stdout === want, `owners:\n${own.stdout}`)
  check((await sbx.files.read('/0/deep/b.txt')) === 'b', 'read back')
  // Reads stay the user's: root's private file is refused, through a
  // symbolic link too; root may read it.
  await sbx.commands.run('mkdir -p /root/priv && echo s > /root/priv/s.txt && chmod 700 /root && ln -sf /root/priv /home/user/privlink', { user: 'root' })
  let refused = false
  try { await sbx.files.read('/home/user/privlink/s.txt') } catch (e) { refused = true }
  check(refused, 'user read a file under /root through a link')
  check((await sbx.files.read('/home/user/privlink/s.txt', { user: 'root' })) === 's\n', 'root read')
  const entries = await sbx.files.list('/0')
  check(entries.map((e) => e.name).sort().join(',') === 'a.txt,deep', `list /0: ${entries.map((e) => e.name)}`)
} finally {
  await sbx.kill()
}
console.log('OK')
