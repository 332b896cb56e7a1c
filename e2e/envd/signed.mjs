// Signed /files URLs (uploadUrl / downloadUrl) made by the real SDK.
// Sets an access token through /init first (no node token is configured, so
// upstream's rule applies: open until a token is set) and removes it at the end.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const dir = process.env.WORK_DIR
const envd = 'http://localhost:49983'
const token = 'e2e-access-token'
const init = async (body, headers = {}) => {
  const r = await fetch(`${envd}/init`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) })
  assert.equal(r.status, 204, `init: ${r.status} ${await r.text()}`)
}
await init({ accessToken: token })
try {
  const sbx = await Sandbox.create()
  sbx.envdAccessToken = token // debug mode has no token; sign as a secured sandbox would

  const path = `${dir}/signed.txt`
  const up = await sbx.uploadUrl(path)
  assert.match(up, /signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['signed content']), path)
  const ur = await fetch(up, { method: 'POST', body: form })
  assert.equal(ur.status, 200, await ur.text())

  const down = await sbx.downloadUrl(path, { useSignatureExpiration: 60 })
  const dr = await fetch(down)
  assert.equal(dr.status, 200)
  assert.equal(await dr.text(), 'signed content')

  // expired signature: the exact body of the contract
  const expired = await sbx.downloadUrl(path, { useSignatureExpiration: -10 })
  const er = await fetch(expired)
  assert.equal(er.status, 401)
  assert.equal((await er.text()).trim(), '{"code":401,"message":"signature is already expired"}')

  // a read signature does not allow a write, and no signature is refused
  const wrongOp = await sbx.downloadUrl(path)
  assert.equal((await fetch(wrongOp, { method: 'POST', body: form })).status, 401)
  assert.equal((await fetch(`${envd}/files?path=${encodeURIComponent(path)}`)).status, 401)
  assert.equal((await fetch(`${envd}/files?path=${encodeURIComponent(path)}`, { headers: { 'X-Access-Token': token } })).status, 200)

  // RPCs need the token now
  const rpc = await fetch(`${envd}/process.Process/List`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })
  assert.equal(rpc.status, 401)
} finally {
  await init({ accessToken: '' }, { 'X-Access-Token': token })
}
console.log('signed ok')
