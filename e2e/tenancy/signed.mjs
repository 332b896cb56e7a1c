// Signed /files URLs made by the real SDK, used through warren serve in
// plain-http mode (E2B_SANDBOX_URL: the URL names no sandbox), by an
// attacker who holds one: it grants one path, one operation, one user,
// one sandbox, until its expiry (docs/security.md, "Signed URLs").
// Team A's sandbox is the victim; team B's (TEAM_B_KEY) is the other
// sandbox. Prints "signed ok" and, on stdout, the lines "A <id>" and
// "A_TOKEN <token>" for the Go side's own checks.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const base = process.env.E2B_SANDBOX_URL
const a = await Sandbox.create('base', { secure: true, timeoutMs: 600_000 })
const b = await Sandbox.create('base', { secure: true, timeoutMs: 600_000, apiKey: process.env.TEAM_B_KEY })
console.log('A', a.sandboxId)
console.log('A_TOKEN', a.envdAccessToken)

const target = '/home/user/a.txt'
const evil = '/home/user/.bashrc_evil'
const form = (...parts) => {
  const f = new FormData()
  for (const [name, content] of parts) f.append('file', new Blob([content]), name)
  return f
}
const post = async (url, body) => {
  const r = await fetch(url, { method: 'POST', body })
  return [r.status, await r.text()]
}
const exists = async (p) => a.files.exists(p)

const up = await a.uploadUrl(target, { useSignatureExpiration: 300 })
assert.ok(up.startsWith(base + '/files?'), `upload URL ${up} is not on E2B_SANDBOX_URL`)
assert.ok(!up.includes(a.sandboxId), `upload URL ${up} names the sandbox`)

// An upload URL signed for one path, with a second part naming another path.
let [st, body] = await post(up, form([target, 'A'], [evil, 'EVIL']))
assert.equal(st, 403, `second part: ${st} ${body}`)
assert.match(body, /only the path it was signed for/)
assert.equal(await exists(target), false, 'the refused upload wrote the signed path')
assert.equal(await exists(evil), false, 'the refused upload wrote the other path')
// A single part naming another path.
;[st, body] = await post(up, form([evil, 'EVIL']))
assert.equal(st, 403, `part naming another path: ${st} ${body}`)
assert.equal(await exists(evil), false)
// A URL signed for no path.
;[st, body] = await post(await a.uploadUrl(undefined, { useSignatureExpiration: 300 }), form([evil, 'EVIL']))
assert.equal(st, 403, `URL signed for no path: ${st} ${body}`)
assert.equal(await exists(evil), false)

// The legitimate upload (a browser's form: its local file name) and download.
;[st, body] = await post(up, form(['local.txt', 'signed content']))
assert.equal(st, 200, `upload: ${st} ${body}`)
assert.equal(await a.files.read(target), 'signed content')
assert.equal(await exists('/home/user/local.txt'), false)
const down = await a.downloadUrl(target, { useSignatureExpiration: 300 })
let r = await fetch(down)
assert.equal(r.status, 200)
assert.equal(await r.text(), 'signed content')
await a.files.write('/home/user/secret.txt', 'not yours')

// Tampering with what the URL names.
const tamper = (url, fn) => { const u = new URL(url); fn(u.searchParams); return u.toString() }
const refused = [
  ['path swapped', tamper(down, (q) => q.set('path', '/home/user/secret.txt')), 'GET'],
  ['path given twice', tamper(down, (q) => q.append('path', '/home/user/secret.txt')), 'GET'],
  ['username added', tamper(down, (q) => q.set('username', 'root')), 'GET'],
  ['expiry extended', tamper(down, (q) => q.set('signature_expiration', String(Number(q.get('signature_expiration')) + 3600))), 'GET'],
  ['expiry dropped', tamper(down, (q) => q.delete('signature_expiration')), 'GET'],
  ['read URL used to write', down, 'POST'],
  ['write URL used to read', up, 'GET'],
  ['expired', await a.downloadUrl(target, { useSignatureExpiration: -10 }), 'GET'],
]
for (const [name, url, method] of refused) {
  r = await fetch(url, method === 'POST' ? { method, body: form(['x', 'x']) } : { method })
  assert.equal(r.status, 401, `${name}: ${r.status} ${await r.text()}`)
}
assert.equal(await a.files.read(target), 'signed content')

// B's URL for the same path reaches B's sandbox, where it is not.
r = await fetch(await b.downloadUrl('/home/user/secret.txt', { useSignatureExpiration: 300 }))
assert.equal(r.status, 404, `B's URL for A's file: ${r.status} ${await r.text()}`)
// A's URL sent to B's sandbox by its ID: B's envd has another token.
r = await fetch(down, { headers: { 'E2b-Sandbox-Id': b.sandboxId, 'E2b-Sandbox-Port': '49983' } })
assert.equal(r.status, 401, `A's URL on B's sandbox: ${r.status}`)
// B's upload URL writes B's sandbox, never A's.
;[st, body] = await post(await b.uploadUrl(target, { useSignatureExpiration: 300 }), form(['f', 'from B']))
assert.equal(st, 200, `B's upload: ${st} ${body}`)
assert.equal(await b.files.read(target), 'from B')
assert.equal(await a.files.read(target), 'signed content')

// The amplification of item 4: made-up signatures with no sandbox ID.
// Each needs a lookup; past the address's budget the answer is 429 with
// Retry-After, and a known URL still works (routed from memory).
let throttled = null
for (let i = 0; i < 200 && !throttled; i++) {
  r = await fetch(`${base}/files?path=%2Fx&signature=v1_made-up-${i}`)
  if (r.status === 429) throttled = r
  else assert.equal(r.status, 401, `made-up signature ${i}: ${r.status}`)
}
assert.ok(throttled, '200 made-up signatures were never throttled')
assert.ok(Number(throttled.headers.get('retry-after')) >= 1, 'no Retry-After')
assert.match(await throttled.text(), /E2b-Sandbox-Id/)
r = await fetch(down)
assert.equal(r.status, 200, `a known URL from the throttled address: ${r.status}`)
// The SDK's own calls name their sandbox and are not affected.
assert.equal(await a.files.read(target), 'signed content')
await new Promise((res) => setTimeout(res, 1000 * Number(throttled.headers.get('retry-after'))))
r = await fetch(await a.downloadUrl(target, { useSignatureExpiration: 200 }))
assert.equal(r.status, 200, `a new URL once the budget is back: ${r.status}`)

await b.kill()
console.log('signed ok')
