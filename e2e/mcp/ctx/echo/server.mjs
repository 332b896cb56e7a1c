// A stdio MCP server without dependencies, run by the gateway as
// github/acme/echo (cloned from file:///srv/git in the e2e template): its
// tool "whoami" tells its environment's secret, whether installCmd ran in
// its root, and its directory. It writes the secret to stderr, which the
// gateway must redact in its log.
import { createInterface } from 'node:readline'
import { existsSync } from 'node:fs'

const send = (m) => process.stdout.write(JSON.stringify(m) + '\n')
console.error(`echo server starting with ${process.env.ECHO_SECRET}`)
createInterface({ input: process.stdin }).on('line', (line) => {
  let msg
  try { msg = JSON.parse(line) } catch { return }
  if (msg.id === undefined) return
  const ok = (result) => send({ jsonrpc: '2.0', id: msg.id, result })
  switch (msg.method) {
    case 'initialize':
      return ok({ protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'echo', version: '1.0.0' } })
    case 'ping':
      return ok({})
    case 'tools/list':
      return ok({ tools: [{ name: 'whoami', description: 'what this server runs with', inputSchema: { type: 'object', properties: {} } }] })
    case 'tools/call':
      return ok({ content: [{ type: 'text', text: JSON.stringify({ secret: process.env.ECHO_SECRET, installed: existsSync('installed'), cwd: process.cwd() }) }] })
    default:
      return send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `no method ${msg.method}` } })
  }
})
