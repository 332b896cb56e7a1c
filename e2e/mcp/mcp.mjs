// The e2b SDK's MCP surface against Warren in domain mode, one case per
// run (argv[2]); each prints "OK <case>" and exits non-zero on the first
// failed check. The MCP client is the TypeScript SDK's, over streamable
// HTTP with getMcpToken() as its bearer token.
//   gateway    Sandbox.create({mcp}) with reference servers: list and call
//              their tools, prompts, resources; 401 without the token; the
//              token file is root's alone
//   badconfig  a config the gateway cannot satisfy (and upstream's test on
//              base): the SDK's "Failed to start MCP gateway", the sandbox
//              killed, no secret in the error
//   template   Template().addMcpServer on mcp-gateway, with a
//              github/<owner>/<repo> server of the template; envs reach it
//              and stay out of the gateway's log
//   tokens     another sandbox's and another team's tokens are refused (and
//              a server that was not pulled is installed at start)
import { Sandbox, Template, SandboxError, BuildError, CommandExitError, SandboxNotFoundError } from 'e2b'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const which = process.argv[2]
const secret = process.env.MCP_E2E_SECRET
const runId = process.env.MCP_E2E_RUN
const keyB = process.env.MCP_E2E_KEY_B
check(secret && runId && keyB, 'MCP_E2E_SECRET, MCP_E2E_RUN and MCP_E2E_KEY_B are set by the Go test')
const timeoutMs = 300_000

const connect = async (url, token) => {
  const client = new Client({ name: 'warren-e2e', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }))
  return client
}
const text = (r) => r.content.map((c) => c.text ?? '').join('')

// status is the HTTP status of an MCP initialize sent to url with token.
const status = async (url, token) => {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'probe', version: '1' } } }),
  })
  await res.body?.cancel()
  return res.status
}

const gone = async (metadata) => (await Sandbox.list({ query: { metadata, state: ['running', 'paused'] } }).nextItems()).length === 0

const cases = {
  async gateway () {
    const sbx = await Sandbox.create({ mcp: { memory: {}, everything: {}, filesystem: { paths: ['/home/user'] } }, timeoutMs })
    try {
      check((await sbx.getInfo()).templateId === 'mcp-gateway', 'not made from mcp-gateway')
      const url = sbx.getMcpUrl()
      check(url === `https://${sbx.getHost(50005)}/mcp`, `getMcpUrl ${url}`)
      const token = await sbx.getMcpToken()
      // Another SDK object reads it from /etc/mcp-gateway/.token, as root.
      const again = await Sandbox.connect(sbx.sandboxId)
      check((await again.getMcpToken()) === token, 'the token file is not the token the gateway serves with')

      const client = await connect(url, token)
      const tools = (await client.listTools()).tools.map((t) => t.name)
      for (const n of ['create_entities', 'read_graph', 'echo', 'get-sum', 'write_file', 'read_text_file', 'list_directory']) {
        check(tools.includes(n), `no tool ${n} in ${JSON.stringify(tools)}`)
      }
      check(text(await client.callTool({ name: 'echo', arguments: { message: 'hello gateway' } })) === 'Echo: hello gateway', 'echo')
      check(text(await client.callTool({ name: 'get-sum', arguments: { a: 2, b: 3 } })).includes('5'), 'get-sum')
      await client.callTool({ name: 'create_entities', arguments: { entities: [{ name: 'warren', entityType: 'project', observations: ['speaks MCP'] }] } })
      check(text(await client.callTool({ name: 'read_graph', arguments: {} })).includes('speaks MCP'), 'memory read_graph')
      await client.callTool({ name: 'write_file', arguments: { path: '/home/user/from-mcp.txt', content: 'written through the gateway' } })
      check((await sbx.files.read('/home/user/from-mcp.txt')) === 'written through the gateway', 'filesystem write_file')
      const outside = await client.callTool({ name: 'read_text_file', arguments: { path: '/etc/mcp-gateway/.token' } })
      check(outside.isError && !text(outside).includes(token), `filesystem read outside its paths: ${JSON.stringify(outside)}`)
      const prompts = (await client.listPrompts()).prompts.map((p) => p.name)
      check(prompts.includes('simple-prompt'), `prompts ${JSON.stringify(prompts)}`)
      const res = await client.readResource({ uri: 'demo://resource/dynamic/text/1' })
      check(res.contents[0].text.includes('Resource 1'), `resource ${JSON.stringify(res)}`)
      await client.close()

      check((await status(url, '')) === 401, 'no token: not 401')
      check((await status(url, token + 'x')) === 401, 'wrong token: not 401')
      check((await status(url, token)) === 200, 'the token: not 200')
      const perms = await sbx.commands.run('stat -c "%a %U" /etc/mcp-gateway/.token /var/log/mcp-gateway.log', { user: 'root' })
      check(perms.stdout === '600 root\n600 root\n', `token and log file modes ${JSON.stringify(perms.stdout)}`)
      const asUser = await sbx.commands.run('cat /etc/mcp-gateway/.token').catch((e) => e)
      check(asUser instanceof CommandExitError, 'the default user reads the token file')
      console.log(`${tools.length} tools, ${prompts.length} prompts from memory, everything, filesystem`)
    } finally {
      await sbx.kill()
    }
  },

  async badconfig () {
    for (const [template, mcp, want] of [
      ['mcp-gateway', { invalid_server: {} }, 'server "invalid_server": not in this gateway\'s catalog'],
      ['mcp-gateway', { memory: {}, filesystem: { paths: ['relative'] } }, 'server "filesystem": "paths"'],
      ['mcp-gateway', { 'github/nobody/missing': { runCmd: 'true', envs: { TOKEN: secret } } }, 'server "github/nobody/missing": git clone'],
      ['base', { invalid_server: {} }, ''], // upstream's test: base has no gateway
    ]) {
      const metadata = { mcpE2E: `${runId}-${Object.keys(mcp).join('-')}-${template}` }
      const err = await Sandbox.create(template, { mcp, metadata, timeoutMs: 60_000, envs: { MCP_GATEWAY_GITHUB_URL: 'file:///nonexistent' } }).catch((e) => e)
      check(err instanceof SandboxError && err.message.includes('Failed to start MCP gateway') && err.message.includes(want),
        `${template} ${JSON.stringify(mcp)}: ${err}`)
      check(!err.message.includes(secret), `the error shows a secret: ${err.message}`)
      check(await gone(metadata), `${template} ${JSON.stringify(mcp)}: the sandbox was not killed`)
      console.log(`${template}: ${err.message.split('\n')[0]}`)
    }
  },

  async template () {
    const name = `mcp-e2e-${runId}`
    let e = null
    try { Template().fromBaseImage().addMcpServer('memory') } catch (x) { e = x }
    check(e instanceof BuildError && e.message.includes('mcp-gateway'), `addMcpServer on another base: ${e}`)
    const bad = await Template.build(Template().fromTemplate('mcp-gateway').addMcpServer('nope-server'), `${name}-bad`).catch((x) => x)
    check(bad instanceof BuildError && bad.message.includes('nope-server'), `a name the catalog lacks: ${bad}`)

    const ctx = path.join(path.dirname(fileURLToPath(import.meta.url)), 'ctx')
    const tpl = Template({ fileContextPath: ctx })
      .fromTemplate('mcp-gateway')
      .addMcpServer(['sequentialthinking', 'memory'])
      .copy('echo', '/srv/git/acme/echo')
      .runCmd('cd /srv/git/acme/echo && git init -q && git add -A && git -c user.name=e2e -c user.email=e2e@warren.invalid commit -qm init', { user: 'root' })
      .setEnvs({ MCP_GATEWAY_GITHUB_URL: 'file:///srv/git' })
    const logs = []
    const started = Date.now()
    await Template.build(tpl, name, { onBuildLogs: (l) => logs.push(l.message) })
    console.log(`built ${name} in ${Date.now() - started} ms`)
    check(logs.some((m) => m.includes('sequentialthinking: @modelcontextprotocol/server-sequential-thinking') && m.includes('installed')),
      `the build did not install sequentialthinking: ${JSON.stringify(logs)}`)

    const sbx = await Sandbox.create(name, {
      mcp: { sequentialthinking: {}, 'github/acme/echo': { runCmd: 'node server.mjs', installCmd: 'touch installed', envs: { ECHO_SECRET: secret } } },
      timeoutMs,
    })
    try {
      const client = await connect(sbx.getMcpUrl(), await sbx.getMcpToken())
      const tools = (await client.listTools()).tools.map((t) => t.name).sort()
      check(JSON.stringify(tools) === '["sequentialthinking","whoami"]', `tools ${JSON.stringify(tools)}`)
      const who = JSON.parse(text(await client.callTool({ name: 'whoami', arguments: {} })))
      check(who.secret === secret && who.installed && who.cwd === '/opt/warren/mcp-gateway/github/acme/echo', `whoami ${JSON.stringify(who)}`)
      const thought = await client.callTool({ name: 'sequentialthinking', arguments: { thought: 'one step', nextThoughtNeeded: false, thoughtNumber: 1, totalThoughts: 1 } })
      check(!thought.isError && text(thought).includes('thoughtNumber'), `sequentialthinking ${JSON.stringify(thought)}`)
      await client.close()
      const log = await sbx.files.read('/var/log/mcp-gateway.log', { user: 'root' })
      check(log.includes('echo server starting with [redacted]') && !log.includes(secret), `the gateway's log:\n${log}`)
      check(!log.includes('not pulled at build time'), `a server was installed at start although pulled:\n${log}`)
    } finally {
      await sbx.kill()
    }
  },

  async tokens () {
    const a = await Sandbox.create({ mcp: { memory: {} }, timeoutMs })
    // B's server is not preinstalled: the gateway installs it at start,
    // offline from the template's npm cache.
    const b = await Sandbox.create({ mcp: { sequentialthinking: {} }, timeoutMs, apiKey: keyB })
    try {
      const [ta, tb] = [await a.getMcpToken(), await b.getMcpToken()]
      check(ta && tb && ta !== tb, 'two sandboxes share a token')
      check((await status(a.getMcpUrl(), tb)) === 401, "team B's sandbox's token opens team A's gateway")
      check((await status(b.getMcpUrl(), ta)) === 401, "team A's token opens team B's gateway")
      check((await status(a.getMcpUrl(), ta)) === 200, "A's own token")
      const log = await b.files.read('/var/log/mcp-gateway.log', { user: 'root' })
      check(log.includes('not pulled at build time') && log.includes('"server started","server":"sequentialthinking"'), `B's gateway log:\n${log}`)
      // Team B cannot get A's token: A's sandbox does not exist for it.
      const viaB = await Sandbox.connect(a.sandboxId, { apiKey: keyB }).catch((x) => x)
      check(viaB instanceof SandboxNotFoundError, `team B connects to A's sandbox: ${viaB}`)
    } finally {
      await a.kill()
      await b.kill()
    }
  },
}

check(cases[which], `no case ${which}`)
await cases[which]()
console.log('OK ' + which)
