// Checks of the code-interpreter-v1 template with the real
// @e2b/code-interpreter SDK against `warren serve` (E2B_API_URL,
// E2B_SANDBOX_URL). Usage: node run.mjs CASE; prints "OK CASE" when every
// check of CASE passed, exits non-zero on the first that failed.
import { Sandbox } from '@e2b/code-interpreter'
import { NotFoundError, TimeoutError } from 'e2b'

const which = process.argv[2]
const fail = (msg) => { console.error(`FAIL ${which}: ${msg}`); process.exit(1) }
const check = (cond, msg) => { if (!cond) fail(msg) }
const j = (x) => JSON.stringify(x)

// contextsOf calls the interpreter's context routes of sbx with its access
// token, as runCode sends it: @e2b/code-interpreter 2.8.0's context
// methods send none, which a secure sandbox refuses (401; see
// docs/code-interpreter.md, "Access").
const contextsOf = (sbx) => {
  const call = async (method, path, body) => {
    const res = await fetch(sbx.jupyterUrl + path, {
      method,
      headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
      body: body === undefined ? undefined : j(body),
    })
    const text = await res.text()
    return { status: res.status, text, json: () => JSON.parse(text) }
  }
  const ok = (what, r, status = 200) => { check(r.status === status, `${what}: ${r.status} ${r.text}`); return r }
  return {
    create: async (opts) => ok('create context', await call('POST', '/contexts', opts)).json(),
    list: async () => ok('list contexts', await call('GET', '/contexts')).json(),
    restart: async (ctx) => { ok('restart context', await call('POST', `/contexts/${ctx.id}/restart`), 204) },
    remove: async (id) => (await call('DELETE', `/contexts/${id}`)).status,
  }
}

const cases = {
  async result(sbx) {
    const e = await sbx.runCode('1+1')
    check(e.error === undefined, `error ${j(e.error)}`)
    check(e.results.length === 1 && e.results[0].isMainResult && e.results[0].text === '2', `results ${j(e.results)}`)
    check(e.text === '2', `text ${j(e.text)}`)
    check(e.executionCount >= 1, `executionCount ${e.executionCount}`)
  },
  async stdout(sbx) {
    const out = [], err = []
    const e = await sbx.runCode('import sys\nprint("hello")\nprint("oops", file=sys.stderr)\nprint("world")', {
      onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line),
    })
    check(out.join('') === 'hello\nworld\n', `onStdout ${j(out)}`)
    check(err.join('') === 'oops\n', `onStderr ${j(err)}`)
    check(e.logs.stdout.join('') === 'hello\nworld\n' && e.logs.stderr.join('') === 'oops\n', `logs ${j(e.logs)}`)
  },
  async state(sbx) {
    await sbx.runCode('x = 41\ndef inc(v):\n    return v + 1')
    const e = await sbx.runCode('inc(x)')
    check(e.text === '42', `text ${j(e.text)} error ${j(e.error)}`)
  },
  async error(sbx) {
    const seen = []
    const e = await sbx.runCode('a = 1\n1 / 0', { onError: (er) => seen.push(er.name) })
    check(e.error && e.error.name === 'ZeroDivisionError', `error ${j(e.error)}`)
    check(e.error.value.includes('division by zero'), `value ${j(e.error.value)}`)
    check(e.error.traceback.includes('ZeroDivisionError') && e.error.traceback.includes('1 / 0'), `traceback ${j(e.error.traceback)}`)
    check(seen.length === 1 && seen[0] === 'ZeroDivisionError', `onError ${j(seen)}`)
    check((await sbx.runCode('a')).text === '1', 'state before the error lost')
  },
  async png(sbx) {
    const e = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()')
    check(e.error === undefined, `error ${j(e.error)}`)
    const r = e.results.find((x) => x.png)
    check(r, `no PNG result in ${j(e.results.map((x) => x.formats()))}`)
    const png = Buffer.from(r.png, 'base64')
    check(png.length > 1000 && png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), `not PNG bytes (${png.length} bytes)`)
    check(png.toString('ascii', 12, 16) === 'IHDR' && png.readUInt32BE(16) > 100 && png.readUInt32BE(20) > 100, 'PNG header size')
  },
  async dataframe(sbx) {
    const e = await sbx.runCode('import pandas as pd\ndf = pd.DataFrame({"city": ["Oslo", "Rome"], "temp": [3, 18]})\ndf')
    check(e.error === undefined, `error ${j(e.error)}`)
    const r = e.results[0]
    check(r && r.isMainResult, `results ${j(e.results)}`)
    check(r.html && r.html.includes('<table') && r.html.includes('Oslo'), `html ${j(r.html)}`)
    check(r.text && r.text.includes('Rome'), `text ${j(r.text)}`)
    check(r.data && j(r.data.columns) === j(['city', 'temp']) && j(r.data.data) === j([['Oslo', 3], ['Rome', 18]]), `data ${j(r.data)}`)
  },
  async envs(sbx) {
    const a = await sbx.runCode('import os\nos.environ.get("CALL_VAR")', { envs: { CALL_VAR: 'per-call' } })
    check(a.text === "'per-call'", `per-call env ${j(a.text)} ${j(a.error)}`)
    const b = await sbx.runCode('str(os.environ.get("CALL_VAR"))')
    check(b.text === "'None'", `per-call env not restored: ${j(b.text)}`)
    const g = await sbx.runCode('os.environ.get("GLOBAL_VAR")')
    check(g.text === "'from-create'", `global env ${j(g.text)}`)
    const o = await sbx.runCode('os.environ.get("GLOBAL_VAR")', { envs: { GLOBAL_VAR: 'override' } })
    check(o.text === "'override'", `override ${j(o.text)}`)
    check((await sbx.runCode('os.environ.get("GLOBAL_VAR")')).text === "'from-create'", 'global env not restored after override')
    const sh = await sbx.runCode('echo "$CALL_VAR/$GLOBAL_VAR"', { language: 'bash', envs: { CALL_VAR: 'sh' } })
    check(sh.logs.stdout.join('') === 'sh/from-create\n', `bash envs ${j(sh.logs)}`)
    const js = await sbx.runCode('process.env.CALL_VAR + "/" + process.env.GLOBAL_VAR', { language: 'javascript', envs: { CALL_VAR: 'js' } })
    check(js.text === "'js/from-create'", `js envs ${j(js.text)} ${j(js.error)}`)
  },
  async contexts(sbx) {
    // The SDK's own context methods send no token: refused, and made nothing.
    for (const [what, call] of [
      ['createCodeContext', () => sbx.createCodeContext({ cwd: '/tmp' })], ['listCodeContexts', () => sbx.listCodeContexts()],
      ['restartCodeContext', () => sbx.restartCodeContext('x')], ['removeCodeContext', () => sbx.removeCodeContext('x')],
    ]) {
      let err
      try { await call() } catch (e) { err = e }
      check(err && String(err).includes('401'), `${what} sends no access token, yet was not refused: ${err}`)
    }
    const contexts = contextsOf(sbx)
    check(!(await contexts.list()).some((c) => c.cwd === '/tmp'), 'a refused createCodeContext made a context')
    const ctx = await contexts.create({ cwd: '/tmp' })
    check(ctx.id && ctx.language === 'python' && ctx.cwd === '/tmp', `context ${j(ctx)}`)
    check((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text === "'/tmp'", 'cwd of the context')
    await sbx.runCode('only_here = 7', { context: ctx })
    check((await sbx.runCode('"only_here" in globals()')).text === 'False', 'default context sees the other context')
    check((await sbx.runCode('only_here', { context: ctx })).text === '7', 'context lost its state')
    const list = await contexts.list()
    check(list.some((c) => c.id === ctx.id && c.cwd === '/tmp'), `list ${j(list)}`)
    await contexts.restart(ctx)
    check((await sbx.runCode('"only_here" in globals()', { context: ctx })).text === 'False', 'restart kept the state')
    check(await contexts.remove(ctx.id) === 204, 'remove')
    check(!(await contexts.list()).some((c) => c.id === ctx.id), 'removed context still listed')
    let err
    try { await sbx.runCode('1', { context: ctx }) } catch (e) { err = e }
    check(err instanceof NotFoundError, `run in removed context: ${err}`)
    check(await contexts.remove(ctx.id) === 404, 'remove twice')
    err = undefined
    try { await sbx.runCode('1', { language: 'cobol' }) } catch (e) { err = e }
    check(err && String(err).includes('400'), `unknown language: ${err}`)
  },
  async bash(sbx) {
    const out = []
    const a = await sbx.runCode('N=5\ncd /tmp\necho "n=$N"', { language: 'bash', onStdout: (m) => out.push(m.line) })
    check(a.logs.stdout.join('') === 'n=5\n' && out.join('') === 'n=5\n', `stdout ${j(a.logs)} ${j(out)}`)
    const b = await sbx.runCode('echo $((N+1)) $(pwd)', { language: 'bash' })
    check(b.logs.stdout.join('') === '6 /tmp\n', `state ${j(b.logs)}`)
    const c = await sbx.runCode('echo bad >&2; false', { language: 'bash' })
    check(c.logs.stderr.join('') === 'bad\n' && c.error && c.error.name === 'ExitCode', `failure ${j(c)}`)
    const ctx = await contextsOf(sbx).create({ language: 'bash' })
    check(ctx.language === 'bash', `bash context ${j(ctx)}`)
    const d = await sbx.runCode('echo "[$N]"', { context: ctx })
    check(d.logs.stdout.join('') === '[]\n', `separate bash context ${j(d.logs)}`)
  },
  async javascript(sbx) {
    const out = []
    const a = await sbx.runCode('const a = 20\nconsole.log("a is", a)\na + 1', { language: 'javascript', onStdout: (m) => out.push(m.line) })
    check(a.text === '21' && out.join('') === 'a is 20\n', `first ${j(a.text)} ${j(out)} ${j(a.error)}`)
    const b = await sbx.runCode('a * 2', { language: 'javascript' })
    check(b.text === '40', `state ${j(b.text)} ${j(b.error)}`)
    const c = await sbx.runCode('new Promise((r) => setTimeout(() => r("later"), 50))', { language: 'javascript' })
    check(c.text === "'later'", `promise ${j(c.text)} ${j(c.error)}`)
    const d = await sbx.runCode('null.x', { language: 'javascript' })
    check(d.error && d.error.name === 'TypeError', `error ${j(d.error)}`)
  },
  async interrupt(sbx) {
    let err
    const started = []
    try {
      await sbx.runCode('import time\nfor i in range(6000):\n    if i == 0: print("started", flush=True)\n    time.sleep(0.1)', {
        timeoutMs: 3000, onStdout: (m) => started.push(m.line),
      })
    } catch (e) { err = e }
    check(err instanceof TimeoutError, `expected a timeout, got ${err}`)
    check(started.join('') === 'started\n', `loop did not start: ${j(started)}`)
    // Had the loop not been interrupted, this would wait for it to end
    // (10 minutes) and i would be 5999.
    const e = await sbx.runCode('i', { timeoutMs: 120_000 })
    check(e.text !== undefined && Number(e.text) < 5999, `loop was not interrupted: i=${j(e.text)} ${j(e.error)}`)
    const k = await sbx.runCode('import os, signal\nos.kill(os.getpid(), signal.SIGKILL)')
    check(k.error && k.error.name === 'KernelDied', `crashed kernel: ${j(k.error)}`)
    check((await sbx.runCode('1+1')).text === '2', 'no kernel after the crash')
  },
  async pause(sbx) {
    await sbx.runCode('kept = {"n": 123}')
    check(await sbx.pause(), 'pause returned false')
    const again = await Sandbox.connect(sbx.sandboxId)
    const e = await again.runCode('kept["n"] + 1')
    check(e.text === '124', `after resume ${j(e.text)} ${j(e.error)}`)
  },
  async random(sbx) {
    // One draw of each generator a user meets: Python's random, numpy's
    // global RandomState and OpenSSL's (Python's ssl), bash's $RANDOM and
    // JavaScript's Math.random.
    const draw = async (s) => {
      const py = await s.runCode('import random, numpy, ssl\n[str(random.getrandbits(64)), str(numpy.random.randint(2**31)), ssl.RAND_bytes(8).hex()]')
      const sh = await s.runCode('echo $RANDOM $RANDOM $RANDOM', { language: 'bash' })
      const js = await s.runCode('Math.random()', { language: 'javascript' })
      check(py.error === undefined && sh.error === undefined && js.error === undefined, `draw: ${j([py.error, sh.error, js.error])}`)
      const [random, numpy, openssl] = JSON.parse(py.text.replaceAll("'", '"'))
      return { random, numpy, openssl, bash: sh.logs.stdout.join('').trim(), javascript: js.text }
    }
    const distinct = (what, draws) => {
      for (const gen of Object.keys(draws[0])) {
        const seen = draws.map((d) => d[gen])
        check(new Set(seen).size === seen.length, `${what}: ${gen} drew the same numbers: ${j(seen)}`)
      }
    }
    const other = await Sandbox.create({ timeoutMs: 300_000 })
    try {
      // Two sandboxes restored from the template's snapshot.
      distinct('two sandboxes of the template', [await draw(sbx), await draw(other)])
      // A fork's copies and its source (whose bash and JavaScript sessions
      // are in the image now).
      const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}/fork`, {
        method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
        body: j({ count: 2, timeout: 300 }),
      })
      const forked = await res.text()
      check(res.status === 201, `fork: ${res.status} ${forked}`)
      const kids = []
      try {
        for (const f of JSON.parse(forked)) {
          check(f.sandbox, `fork: ${j(f)}`)
          kids.push(await Sandbox.connect(f.sandbox.sandboxID))
        }
        distinct('a fork and its source', [await draw(kids[0]), await draw(kids[1]), await draw(sbx)])
      } finally {
        for (const k of kids) await k.kill().catch(() => {})
      }
      // A pause and resume: after the resume Python does not draw what the
      // state saved before the pause gives.
      await other.runCode('before_pause = (random.getstate(), numpy.random.get_state())')
      check(await other.pause(), 'pause returned false')
      const again = await Sandbox.connect(other.sandboxId)
      const e = await again.runCode('drawn = (random.getrandbits(64), numpy.random.randint(2**31))\nrandom.setstate(before_pause[0]); numpy.random.set_state(before_pause[1])\ndrawn != (random.getrandbits(64), numpy.random.randint(2**31))')
      check(e.text === 'True', `after a resume Python drew what the state before the pause gives: ${j(e.text)} ${j(e.error)}`)
    } finally {
      await other.kill().catch(() => {})
    }
  },
  async bench() {
    const n = Number(process.env.CODE_INTERPRETER_BENCH_N || 5)
    // Untimed wait before each create: a warm pool refills in it, as
    // between the creates of a user's program.
    const gap = Number(process.env.CODE_INTERPRETER_BENCH_GAP_MS || 0)
    const times = []
    for (let i = 0; i < n; i++) {
      if (gap > 0) await new Promise((r) => setTimeout(r, gap))
      const t0 = performance.now()
      const sbx = await Sandbox.create({ timeoutMs: 120_000 })
      const e = await sbx.runCode('1+1')
      times.push(performance.now() - t0)
      check(e.text === '2', `bench result ${j(e.text)}`)
      await sbx.kill()
    }
    times.sort((a, b) => a - b)
    console.log(`BENCH create->first runCode('1+1') gap=${gap}ms n=${n} p50=${times[Math.floor(n / 2)].toFixed(0)}ms min=${times[0].toFixed(0)}ms max=${times[n - 1].toFixed(0)}ms`)
  },
}

if (!cases[which]) fail(`unknown case; one of ${Object.keys(cases).join(', ')}`)
if (which === 'bench') {
  await cases.bench()
} else {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { GLOBAL_VAR: 'from-create' } })
  try {
    await cases[which](sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}
console.log('OK ' + which)
// runCode leaves its request timer (60 s) running when the server answers
// an error status; exit without waiting for it.
process.exit(0)
