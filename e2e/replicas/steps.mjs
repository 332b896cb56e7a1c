// The steps of TestReplicas, each run with the real E2B SDK against the
// `warren api` replica named by E2B_API_URL and E2B_SANDBOX_URL:
//
//   node steps.mjs STEP ID...
//
// create N   creates N sandboxes; prints "ids <json array>"
// work       runs a command, writes /home/user/r.txt (its ID) and serves
//            /tmp/www (index.html: its ID) with python3 -m http.server 8000
// check      reads r.txt back, runs a command and fetches port 8000
// kill       kills the sandbox
// gone       the sandbox is killed: not found, not listed, its traffic 502
// pause      pauses the sandbox
// paused     the sandbox is paused: listed as paused, not as running, its
//            traffic a 502 "paused"
// resume     connects (resumes) and checks as check does
// lost       the sandbox was killed with kill reason node_lost (polls)
//
// Each step exits non-zero on its first failed check and prints OK at the end.
import { Sandbox, NotFoundError } from 'e2b'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const sandboxUrl = process.env.E2B_SANDBOX_URL
const apiUrl = process.env.E2B_API_URL
const [step, ...args] = process.argv.slice(2)

// port fetches path from port of sandbox id through this replica's proxy.
const port = async (id, p, path = '/') => {
  const r = await fetch(sandboxUrl + path, { headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(p) } })
  return { status: r.status, body: await r.text() }
}

// served waits (up to two minutes) for port 8000 to serve the sandbox's ID.
const served = async (id) => {
  let last
  for (const deadline = Date.now() + 120_000; Date.now() < deadline; await sleep(250)) {
    last = await port(id, 8000, '/index.html')
    if (last.status === 200) {
      check(last.body === id + '\n', `${id}: port 8000 served ${JSON.stringify(last.body)}`)
      return
    }
  }
  fail(`${id}: port 8000 through ${sandboxUrl}: ${last.status} ${last.body}`)
}

const checkSandbox = async (sbx) => {
  const id = sbx.sandboxId
  const r = await sbx.commands.run('echo $((6*7))')
  check(r.exitCode === 0 && r.stdout === '42\n', `${id}: command stdout ${JSON.stringify(r.stdout)}`)
  const data = await sbx.files.read('/home/user/r.txt')
  check(data === id, `${id}: r.txt holds ${JSON.stringify(data)}`)
  await served(id)
}

const listed = async (state) => {
  const out = []
  const pages = Sandbox.list({ query: { state: [state] } })
  while (pages.hasNext) out.push(...(await pages.nextItems()))
  return out.map((s) => s.sandboxId)
}

switch (step) {
  case 'create': {
    const ids = []
    for (let i = 0; i < Number(args[0]); i++) {
      const sbx = await Sandbox.create('base', { timeoutMs: 900_000 })
      ids.push(sbx.sandboxId)
    }
    console.log('ids ' + JSON.stringify(ids))
    break
  }
  case 'work':
    for (const id of args) {
      const sbx = await Sandbox.connect(id, { timeoutMs: 900_000 })
      await sbx.files.write('/home/user/r.txt', id)
      await sbx.commands.run(`mkdir -p /tmp/www && echo ${id} > /tmp/www/index.html`)
      // No timeout (a command's default is 60 s, after which envd kills
      // it), and detached: the server outlives this script.
      const server = await sbx.commands.run('cd /tmp/www && python3 -m http.server 8000 >/dev/null 2>&1', { background: true, timeoutMs: 0 })
      await server.disconnect()
      await checkSandbox(sbx)
    }
    break
  case 'check':
    for (const id of args) await checkSandbox(await Sandbox.connect(id, { timeoutMs: 900_000 }))
    break
  case 'kill':
    check(await Sandbox.kill(args[0]), `kill ${args[0]} returned false`)
    break
  case 'gone': {
    const id = args[0]
    try {
      const info = await Sandbox.getInfo(id)
      fail(`${id}: getInfo of a killed sandbox: ${JSON.stringify(info)}`)
    } catch (e) {
      check(e instanceof NotFoundError, `${id}: getInfo: ${e}`)
    }
    check(!(await listed('running')).includes(id) && !(await listed('paused')).includes(id), `${id}: listed after its kill`)
    const r = await port(id, 49983, '/health')
    check(r.status === 502 && r.body.includes('not found'), `${id}: envd through ${sandboxUrl}: ${r.status} ${r.body}`)
    const p = await port(id, 8000, '/index.html')
    check(p.status === 502, `${id}: port 8000 through ${sandboxUrl}: ${p.status} ${p.body}`)
    break
  }
  case 'pause': {
    const sbx = await Sandbox.connect(args[0], { timeoutMs: 900_000 })
    check(await sbx.pause(), `pause ${args[0]} returned false`)
    break
  }
  case 'paused': {
    const id = args[0]
    const info = await Sandbox.getInfo(id)
    check(info.state === 'paused', `${id}: state ${info.state}`)
    check((await listed('paused')).includes(id), `${id}: not listed as paused`)
    check(!(await listed('running')).includes(id), `${id}: listed as running`)
    const r = await port(id, 8000, '/index.html')
    check(r.status === 502 && r.body.includes('paused'), `${id}: port 8000 of a paused sandbox: ${r.status} ${r.body}`)
    break
  }
  case 'resume': {
    const sbx = await Sandbox.connect(args[0], { timeoutMs: 900_000 })
    check((await sbx.getInfo()).state === 'running', `${args[0]}: not running after connect`)
    await checkSandbox(sbx)
    break
  }
  case 'lost':
    for (const id of args) {
      let last
      for (const deadline = Date.now() + 180_000; ; await sleep(500)) {
        check(Date.now() < deadline, `${id}: no node_lost kill; events ${JSON.stringify(last)}`)
        const r = await fetch(`${apiUrl}/events/sandboxes/${id}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
        check(r.status === 200, `${id}: events ${r.status} ${await r.clone().text()}`)
        last = await r.json()
        const killed = last.filter((e) => e.type === 'sandbox.lifecycle.killed')
        if (killed.length === 0) continue
        check(killed.length === 1 && killed[0].eventData.kill_reason === 'node_lost', `${id}: killed events ${JSON.stringify(killed)}`)
        break
      }
      try {
        await Sandbox.getInfo(id)
        fail(`${id}: getInfo of a sandbox killed with node_lost answered`)
      } catch (e) {
        check(e instanceof NotFoundError, `${id}: getInfo: ${e}`)
      }
    }
    break
  default:
    fail(`unknown step ${step}`)
}
console.log('OK')
