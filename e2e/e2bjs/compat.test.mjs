// Compatibility checks for issue #14, through the OFFICIAL E2B JS SDKs against
// `code-sandboxes serve`: IPython cell transforms, charts and data, envd's
// newer file API (metadata, entry info in watch events, in-place uploads),
// the writable root and the root user, TypeScript, an expired signed URL and
// an execution cut off by a kill. Same contract as sdk.test.mjs: one JSON
// line ({ok, steps, error?}) on stdout; the Go test
// (internal/e2bserver/e2bjs_compat_test.go) asserts on it.
import { Sandbox, FilesystemEventType } from '@e2b/code-interpreter'

const steps = {}
let sbx

async function step(name, fn) {
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

try {
  sbx = await Sandbox.create({ timeoutMs: 120_000 })

  await step('ipython', async () => {
    const bang = await sbx.runCode('!echo hi from bang')
    const assign = await sbx.runCode('lines = !printf "a\\nb\\n"\nlines')
    const bash = await sbx.runCode('%%bash\necho from bash $((6*7))\n')
    const dedent = await sbx.runCode('    v = 5\n    if v:\n        w = v * 2\n    w')
    const cd = await sbx.runCode('%cd /tmp')
    const pwd = await sbx.runCode('!pwd')
    const env = await sbx.runCode('%env CS_COMPAT=1\nimport os\nos.environ["CS_COMPAT"]')
    const time = await sbx.runCode('%time 6 * 7')
    const wf = await sbx.runCode('%%writefile /tmp/cs_wf.txt\nwritten\n')
    const wfRead = await sbx.runCode('open("/tmp/cs_wf.txt").read()')
    const hist = await sbx.runCode('_ , Out[max(Out)] == _')
    const awaited = await sbx.runCode('import asyncio\nawait asyncio.sleep(0)\n"awaited"')
    const bad = await sbx.runCode('%nosuchmagic')
    return {
      bang: bang.logs.stdout.join(''),
      assign: assign.text,
      bash: bash.logs.stdout.join(''),
      dedent: dedent.text,
      cd: cd.logs.stdout.join(''),
      pwd: pwd.logs.stdout.join(''),
      env: env.text,
      timeText: time.text,
      timeOut: time.logs.stdout.join(''),
      writefile: wfRead.text,
      hist: hist.text,
      awaited: awaited.text,
      badError: bad.error?.name ?? null,
      errors: [bang, assign, bash, dedent, cd, pwd, env, time, wf, hist, awaited].map((x) => x.error?.name ?? null),
    }
  })

  await step('charts', async () => {
    const out = {}
    for (const [name, code] of Object.entries({
      line: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9], label='sq')\nplt.xlabel('x (m)')\nplt.title('L')\nplt.show()",
      scatter: "import matplotlib.pyplot as plt\nplt.scatter([1, 2], [3, 4], label='s')\nplt.show()",
      bar: "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 4], label='g')\nplt.show()",
      pie: "import matplotlib.pyplot as plt\nplt.pie([1, 3], labels=['p', 'q'])\nplt.show()",
      box: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.boxplot([[1, 2, 3, 4, 5]], patch_artist=True)\nplt.show()",
      superchart: "import matplotlib.pyplot as plt\nfig, axs = plt.subplots(1, 2)\nfig.suptitle('S')\naxs[0].plot([1, 2])\naxs[1].scatter([1], [2])\nplt.show()",
      unknown: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.add_artist(plt.Circle((0, 0), 1))\nplt.title('C')\nplt.show()",
    })) {
      const ex = await sbx.runCode(code)
      const r = ex.results[0]
      out[name] = { error: ex.error?.name ?? null, png: !!r?.png, chart: r?.chart ?? null }
    }
    const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", None]})')
    out.data = df.results[0]?.data ?? null
    return out
  })

  await step('languages', async () => {
    const js1 = await sbx.runCode('const greeting = "hi from js"; console.log(greeting)', { language: 'js' })
    const js2 = await sbx.runCode('greeting.length + 1', { language: 'javascript' })
    const jsAwait = await sbx.runCode("import { basename } from 'path'\nawait Promise.resolve(basename('/x/y.txt'))", { language: 'js' })
    const jsErr = await sbx.runCode('undefinedName', { language: 'js' })
    const jsEnv = await sbx.runCode('process.env.CS_LANG', { language: 'js', envs: { CS_LANG: 'scoped' } })
    const r1 = await sbx.runCode('v <- c(1, 2, 3)', { language: 'r' })
    const r2 = await sbx.runCode('sum(v) * 7', { language: 'r' })
    const sh1 = await sbx.runCode('COUNT=41', { language: 'bash' })
    const sh2 = await sbx.runCode('echo $((COUNT + 1))', { language: 'bash' })
    const ctx = await sbx.createCodeContext({ language: 'js' })
    const inCtx = await sbx.runCode('typeof greeting', { context: ctx })
    const listed = (await sbx.listCodeContexts()).map((c) => c.language)
    let refused = null
    try {
      await sbx.runCode('1 + 1', { language: 'cobol' })
    } catch (e) {
      refused = { thrown: e?.constructor?.name, message: String(e?.message) }
    }
    return {
      js: js1.logs.stdout.join(''), jsState: js2.text, jsAwait: jsAwait.text, jsError: jsErr.error?.name ?? null,
      jsEnv: jsEnv.text, r: r2.text, rError: r1.error?.name ?? null, bash: sh2.logs.stdout.join(''), bashError: sh1.error?.name ?? null,
      contextLanguage: ctx.language, inContext: inCtx.text, listed, refused,
    }
  })

  await step('envdVersion', async () => (await sbx.getInfo()).envdVersion)

  await step('metadata', async () => {
    const w = await sbx.files.write('meta.txt', 'm', { metadata: { author: 'cs', purpose: 'test' } })
    const info = await sbx.files.getInfo('meta.txt')
    const over = await sbx.files.write('meta.txt', 'n')
    const after = await sbx.files.getInfo('meta.txt')
    let invalid = null
    try {
      await sbx.files.write('bad.txt', 'x', { metadata: { good: 'bad\nvalue' } })
    } catch (e) {
      invalid = e?.constructor?.name
    }
    return { written: w.metadata ?? null, stat: info.metadata ?? null, overwritten: over.metadata ?? null, after: after.metadata ?? null, invalid }
  })

  await step('watch', async () => {
    await sbx.files.makeDir('watched')
    const events = []
    const handle = await sbx.files.watchDir('watched', (e) => events.push({ name: e.name, type: e.type, entry: e.entry ? { name: e.entry.name, size: e.entry.size } : null }), { includeEntry: true })
    await sbx.files.write('watched/up.txt', 'first')
    await sbx.files.write('watched/up.txt', 'second!')
    for (let i = 0; i < 50 && !events.some((e) => e.type === FilesystemEventType.WRITE && e.entry?.size === 7); i++) await sleep(100)
    await handle.stop()
    return { events }
  })

  // A writable root directory, the user root (sudo and user: 'root'), and a
  // TypeScript cell.
  await step('root', async () => {
    const top = await sbx.files.write([{ path: '/cs_top/f.txt', data: 'top' }])
    const mk = await sbx.commands.run('mkdir /cs_dir && stat -c %U /cs_dir')
    const id = await sbx.commands.run('id -u; whoami; echo $HOME; pwd', { user: 'root' })
    const sudo = await sbx.commands.run('sudo echo "via sudo $FOO"', { envs: { FOO: 'x' } })
    await sbx.files.write('as-root.txt', 'root data', { user: 'root' })
    const rootRead = await sbx.files.read('/root/as-root.txt', { user: 'root' })
    const owner = await sbx.commands.run('stat -c %U /root/as-root.txt')
    let agent = null
    try {
      await sbx.commands.run('kill -9 1', { user: 'root' })
      agent = 'killed?'
    } catch (e) {
      agent = e?.constructor?.name
    }
    const ts = await sbx.runCode('const n: number = 6 * 7; console.log(`ts ${n}`)', { language: 'ts' })
    const tsCwd = await sbx.runCode('process.cwd()', { language: 'typescript' })
    const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/root' })
    const inRoot = await sbx.runCode('import os; os.getcwd()', { context: ctx })
    return {
      top: top[0]?.path, topRead: await sbx.files.read('/cs_top/f.txt'), mk: mk.stdout, id: id.stdout, sudo: sudo.stdout,
      rootRead, owner: owner.stdout, agent, ts: ts.logs.stdout.join(''), tsError: ts.error?.name ?? null, tsCwd: tsCwd.text,
      ctxCwd: ctx.cwd, inRoot: inRoot.text,
    }
  })

  // The filesystem RPCs as root (user: 'root'): root's own 0700 directory
  // listed, stat'ed, watched, created in, moved in and removed from; and
  // what root can't reach stays refused: the system directories, the
  // agent's /proc entries (directly, through a symlink, or a symlink
  // flipping under a listing), the host's own /root.
  await step('rootFiles', async () => {
    const R = { user: 'root' }
    const err = async (p) => {
      try {
        await p
        return null
      } catch (e) {
        return e?.constructor?.name ?? String(e)
      }
    }
    await sbx.commands.run('mkdir -m 700 /root/secret && echo s > /root/secret/f && ln -s /proc/1/fd /root/proclink', R)
    const asUser = await err(sbx.files.list('/root/secret'))
    const list = (await sbx.files.list('/root/secret', R)).map((e) => `${e.name}:${e.owner}`)
    const info = await sbx.files.getInfo('/root/secret/f', R)
    const exists = await sbx.files.exists('/root/secret/f', R)
    const events = []
    const handle = await sbx.files.watchDir('/root/secret', (e) => events.push(`${e.type}:${e.name}`), R)
    await sbx.commands.run('echo more > /root/secret/g', R)
    for (let i = 0; i < 50 && !events.some((e) => e.endsWith(':g')); i++) await sleep(100)
    await handle.stop()
    const made = await sbx.files.makeDir('/root/secret/sub/deep', R)
    const madeOwner = (await sbx.commands.run('stat -c %U /root/secret/sub/deep', R)).stdout
    const moved = await sbx.files.rename('/root/secret/g', '/root/secret/sub/g2', R)
    await sbx.files.remove('/root/secret/f', R)
    const after = (await sbx.files.list('/root/secret', { ...R, depth: 3 })).map((e) => e.path).sort()
    const rootTop = (await sbx.files.list('/root', R)).map((e) => e.name).sort()
    const refused = {
      mkdirEtc: await err(sbx.files.makeDir('/etc/cs_evil', R)),
      removeUsr: await err(sbx.files.remove('/usr/bin/env', R)),
      moveUsr: await err(sbx.files.rename('/usr/bin/env', '/root/env', R)),
      dotdot: await err(sbx.files.makeDir('/root/../../../usr/cs_evil', R)),
      listProc: await err(sbx.files.list('/proc/1/fd', R)),
      listProcLink: await err(sbx.files.list('/root/proclink', R)),
      statProcEnv: await err(sbx.files.getInfo('/proc/1/environ', R)),
      watchProc: await err(sbx.files.watchDir('/proc/1/fd', () => {}, R)),
      removeSlash: await err(sbx.files.remove('/', R)),
    }
    // A symlink to the agent's fds flipping with an empty directory while
    // root lists it: no listing may ever show an entry.
    const flip = await sbx.commands.run(
      "sudo sh -c 'i=0; while [ $i -lt 400 ]; do rm -rf /root/race; mkdir /root/race; rmdir /root/race; ln -s /proc/1/fd /root/race; i=$((i+1)); done'",
      { background: true }
    )
    let raceEntries = 0
    for (let i = 0; i < 30; i++) {
      try {
        raceEntries += (await sbx.files.list('/root/race', R)).length
      } catch {}
    }
    await flip.kill()
    const intact = (await sbx.commands.run('test -e /usr/bin/env && test ! -e /etc/cs_evil && test ! -e /usr/cs_evil && echo intact')).stdout
    return {
      asUser, list, info: { owner: info.owner, type: info.type, size: info.size }, exists, events, made, madeOwner,
      moved: moved.path, after, rootTop, refused, raceEntries, intact,
    }
  })

  // A signed URL past its expiration: envd's own answer, word for word.
  await step('expiredUrl', async () => {
    await sbx.files.write('exp.txt', 'e')
    const url = await sbx.downloadUrl('exp.txt', { useSignatureExpiration: -10_000 })
    // Named by header: with E2B_SANDBOX_URL the URL itself names no sandbox.
    const res = await fetch(url, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } })
    return { status: res.status, body: await res.json() }
  })

  await sbx.kill()
  sbx = null

  // A sandbox killed while runCode waits: the SDK must see a response cut
  // off ("killed while the request was in progress").
  await step('killedDuringRun', async () => {
    const s = await Sandbox.create({ timeoutMs: 120_000 })
    const run = s.runCode('import time; time.sleep(300)', { timeoutMs: 300_000 }).then(
      () => ({ thrown: null }),
      (e) => ({ thrown: e?.constructor?.name, message: String(e?.message) }),
    )
    await sleep(2_000)
    await s.kill()
    return await run
  })

  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  if (sbx) await sbx.kill().catch(() => {})
  console.log(JSON.stringify({ ok: false, error: `${e?.constructor?.name}: ${e?.stack ?? e}`, steps }))
  process.exitCode = 1
}
process.exit()
