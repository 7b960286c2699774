// Drives `code-sandboxes serve` with the OFFICIAL E2B JS SDKs, unmodified.
// Needs E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY in the environment.
// Prints one JSON object on stdout ({ok, steps, error?}); the Go test
// (internal/e2bserver/e2bjs_test.go) asserts on it, so every step records
// what it observed rather than judging it here.
import http from 'node:http'
import { Sandbox, AuthenticationError, CommandExitError, SandboxNotFoundError } from '@e2b/code-interpreter'

const steps = {}
const timings = {} // ms per step, for spotting a slow path
let sbx

async function step(name, fn) {
  const t0 = Date.now()
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
  timings[name] = Date.now() - t0
}

try {
  const t0 = Date.now()
  sbx = await Sandbox.create({ metadata: { suite: 'e2bjs', note: 'a&b=c d/é' }, timeoutMs: 120_000 })
  steps.create = { sandboxId: sbx.sandboxId, ms: Date.now() - t0 }

  await step('runCode', async () => {
    const a = await sbx.runCode('x = 40')
    const b = await sbx.runCode('x + 2')
    return { first: a.error ?? null, text: b.text, executionCount: b.executionCount }
  })

  await step('onStdout', async () => {
    const lines = []
    const ex = await sbx.runCode('import time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.05)', {
      onStdout: (m) => lines.push(m.line),
    })
    return { callbackLines: lines, logs: ex.logs.stdout }
  })

  await step('error', async () => {
    const ex = await sbx.runCode('def f():\n    return 1/0\nf()')
    return { name: ex.error?.name, value: ex.error?.value, traceback: ex.error?.traceback }
  })

  await step('figure', async () => {
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()')
    const r = ex.results.find((x) => x.png)
    return { formats: ex.results.map((x) => x.formats()), pngPrefix: r ? Buffer.from(r.png, 'base64').subarray(0, 4).toString('hex') : null, error: ex.error?.name ?? null }
  })

  await step('context', async () => {
    const ctx = await sbx.createCodeContext()
    await sbx.runCode('y = "in context"', { context: ctx })
    const inCtx = await sbx.runCode('y', { context: ctx })
    const outside = await sbx.runCode('"y" in globals()')
    const listed = (await sbx.listCodeContexts()).map((c) => c.id)
    await sbx.removeCodeContext(ctx)
    return { text: inCtx.text, leaked: outside.text, listed: listed.includes(ctx.id) }
  })

  await step('files', async () => {
    await sbx.files.write('/home/user/a.txt', 'hello file')
    const read = await sbx.files.read('/home/user/a.txt')
    const names = (await sbx.files.list('/home/user')).map((e) => e.name)
    const exists = await sbx.files.exists('/home/user/nope.txt')
    return { read, names, missingExists: exists }
  })

  // Signed URLs, fetched with no token. With E2B_SANDBOX_URL set they don't
  // name the sandbox, and serve refuses them (400: it would have to hash
  // the signature once per sandbox to find its owner); named by the
  // E2b-Sandbox-Id header (or the Host <port>-<id>.<domain>), they work.
  await step('signedUrls', async () => {
    const named = { 'E2b-Sandbox-Id': sbx.sandboxId }
    const up = await sbx.uploadUrl('/home/user/up.txt', { useSignatureExpiration: 60 })
    const form = new FormData()
    form.append('file', new Blob(['uploaded via url']), 'up.txt')
    const upStatus = (await fetch(up, { method: 'POST', body: form, headers: named })).status
    const down = await sbx.downloadUrl('/home/user/up.txt')
    const bare = await fetch(down)
    const dr = await fetch(down, { headers: named })
    const tampered = new URL(down)
    tampered.searchParams.set('path', '/home/user/a.txt')
    const unsigned = new URL(down)
    unsigned.searchParams.delete('signature')
    return {
      upStatus, downStatus: dr.status, body: await dr.text(), bareStatus: bare.status, bareBody: await bare.text(),
      tamperedStatus: (await fetch(tampered, { headers: named })).status, unsignedStatus: (await fetch(unsigned, { headers: named })).status,
    }
  })

  await step('commands', async () => {
    const r = await sbx.commands.run('echo hi')
    let failed = null
    try {
      await sbx.commands.run('echo oops >&2; exit 3')
    } catch (e) {
      failed = { thrown: e?.constructor?.name, exitCode: e?.exitCode, stderr: e?.stderr, isCommandExitError: e instanceof CommandExitError }
    }
    return { stdout: r.stdout, exitCode: r.exitCode, failed }
  })

  await step('getHost', async () => {
    // A server inside the sandbox, reached the E2B way: getHost(port) names
    // <port>-<id>.<domain>. *.localhost need not resolve here, so connect to
    // the server's address and send that name as the Host header.
    const bg = await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true, cwd: '/home/user' })
    await sbx.commands.run('for i in $(seq 100); do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8000))" 2>/dev/null && break; sleep 0.05; done')
    const api = new URL(process.env.E2B_SANDBOX_URL)
    const host = sbx.getHost(8000)
    const res = await new Promise((resolve, reject) => {
      http.get({ host: api.hostname, port: api.port, path: '/a.txt', headers: { Host: host } }, (r) => {
        let body = ''
        r.on('data', (c) => (body += c))
        r.on('end', () => resolve({ status: r.statusCode, body }))
      }).on('error', reject)
    })
    await bg.kill()
    return { host, ...res }
  })

  await step('list', async () => {
    const mine = await Sandbox.list({ query: { metadata: { note: 'a&b=c d/é' } } }).nextItems()
    const other = await Sandbox.list({ query: { metadata: { note: 'something else' } } }).nextItems()
    return { ids: mine.map((s) => s.sandboxId), otherIds: other.map((s) => s.sandboxId), state: mine[0]?.state }
  })

  await step('setTimeout', async () => {
    await sbx.setTimeout(60_000)
    const info = await sbx.getInfo()
    return {
      endInSeconds: Math.round((info.endAt.getTime() - Date.now()) / 1000),
      templateId: info.templateId,
      metadata: info.metadata,
      state: info.state,
      envdVersion: info.envdVersion,
      cpuCount: info.cpuCount,
      memoryMB: info.memoryMB,
    }
  })

  await step('connect', async () => {
    const again = await Sandbox.connect(sbx.sandboxId)
    const ex = await again.runCode('x * 2')
    return { text: ex.text }
  })

  await step('kill', async () => {
    const running = await sbx.isRunning()
    const first = await sbx.kill()
    const second = await Sandbox.kill(sbx.sandboxId)
    const runningAfter = await sbx.isRunning()
    let getInfoAfter = null
    try {
      await Sandbox.getInfo(sbx.sandboxId)
    } catch (e) {
      getInfoAfter = { thrown: e?.constructor?.name, isNotFound: e instanceof SandboxNotFoundError }
    }
    let runAfter = null
    try {
      await sbx.runCode('1')
    } catch (e) {
      runAfter = { thrown: e?.constructor?.name, message: String(e?.message) }
    }
    return { running, first, second, runningAfter, getInfoAfter, runAfter }
  })

  await step('wrongKey', async () => {
    try {
      await Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) })
      return { thrown: null }
    } catch (e) {
      return { thrown: e?.constructor?.name, isAuthenticationError: e instanceof AuthenticationError, message: String(e?.message) }
    }
  })

  console.log(JSON.stringify({ ok: true, steps, timings }))
} catch (e) {
  if (sbx) await sbx.kill().catch(() => {})
  console.log(JSON.stringify({ ok: false, error: `${e?.constructor?.name}: ${e?.stack ?? e}`, steps, timings }))
  process.exitCode = 1
}
// The SDK's runCode leaves its 60 s request timer armed when the request
// fails (the runCode in a killed sandbox above), which would keep node alive
// for a minute after the work is done. stdout is a pipe, written
// synchronously on Linux, so exiting now loses nothing.
process.exit()
