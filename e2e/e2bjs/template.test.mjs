// Drives `code-sandboxes serve --template-builds` with the OFFICIAL E2B JS
// SDK's Template builder, unmodified: build a template with apt, pip, copy
// and run steps, create a sandbox on it, run code, then rebuild, list and
// delete. Needs E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and PIP_INDEX (a
// package index on loopback serving cs-tpl 1.0). Prints one JSON object
// ({ok, steps, error?}); internal/e2bserver/templates_test.go asserts on it.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template, waitForFile } from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'

const steps = {}
const api = process.env.E2B_API_URL
const headers = { 'X-API-Key': process.env.E2B_API_KEY }

async function step(name, fn) {
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
}

let sbx
try {
  const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'cs-tpl-'))
  fs.mkdirSync(path.join(ctx, 'data'))
  fs.writeFileSync(path.join(ctx, 'data', 'hello.txt'), 'hello from a copy step\n')

  const template = Template({ fileContextPath: ctx })
    .fromTemplate('code-interpreter-v1')
    .aptInstall(['tree'], { noInstallRecommends: true })
    .setEnvs({ PIP_INDEX_URL: process.env.PIP_INDEX, TPL_MARK: 'set-by-env' })
    .pipInstall(['cs-tpl==1.0'])
    .copy('data/hello.txt', '/srv/data/')
    .runCmd('echo "built as $(id -un)" > /srv/built')

  await step('build', async () => {
    const logs = []
    const info = await Template.build(template, 'e2e-tpl', {
      cpuCount: 1,
      memoryMB: 512,
      onBuildLogs: (e) => logs.push(e.message),
    })
    return { templateId: info.templateId, buildId: info.buildId, name: info.name, logLines: logs.length,
      sawApt: logs.some((l) => /tree/.test(l)), sawPip: logs.some((l) => /cs[-_]tpl/i.test(l)) }
  })

  await step('exists', async () => ({ mine: await Template.exists('e2e-tpl'), other: await Template.exists('no-such-tpl') }))

  await step('runCode', async () => {
    sbx = await Sandbox.create('e2e-tpl', { timeoutMs: 120_000 })
    const ex = await sbx.runCode(
      'import os, cs_tpl\nprint(cs_tpl.VALUE, "|", open("/srv/data/hello.txt").read().strip(), "|", open("/srv/built").read().strip(), "|", os.environ.get("TPL_MARK"))')
    const tree = await sbx.commands.run('tree --version')
    return { stdout: ex.logs.stdout.join(''), error: ex.error?.value ?? null, tree: tree.stdout.trim() }
  })

  // The same steps again: the cached build, same environment.
  await step('rebuild', async () => {
    const info = await Template.build(template, 'e2e-tpl')
    return { buildId: info.buildId }
  })

  // The SDK has no list or delete: these are the REST calls E2B's CLI makes.
  await step('list', async () => {
    const res = await fetch(`${api}/templates`, { headers })
    return { status: res.status, templates: await res.json() }
  })

  await step('sandboxStillRuns', async () => (await sbx.runCode('1 + 1')).text)

  await step('delete', async () => {
    const id = steps.build.templateId
    const res = await fetch(`${api}/templates/${id}`, { method: 'DELETE', headers })
    return { status: res.status, existsAfter: await Template.exists('e2e-tpl') }
  })

  // Start and ready commands: a service every sandbox of the template
  // starts as the sandbox's user, handed out once the ready command passes;
  // its output is in the sandbox's logs.
  await step('startReady', async () => {
    const svc = 'python3 -c \'import http.server, os; s = http.server.HTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler); print("service up as", os.getuid(), flush=True); open("/tmp/started", "w").close(); s.serve_forever()\''
    await Template.build(Template().fromTemplate('code-interpreter-v1').setStartCmd(svc, waitForFile('/tmp/started')), 'e2e-start')
    const s2 = await Sandbox.create('e2e-start', { timeoutMs: 60_000 })
    try {
      const ex = await s2.runCode('import urllib.request\nprint(urllib.request.urlopen("http://127.0.0.1:8000/").status)')
      const res = await fetch(`${api}/v2/sandboxes/${s2.sandboxId}/logs`, { headers })
      const logs = (await res.json()).logs.map((l) => l.message)
      return { status: ex.logs.stdout.join('').trim(), error: ex.error?.value ?? null, logsStatus: res.status, logs }
    } finally {
      await s2.kill()
    }
  })

  // A start command that fails: create fails with the reason, and nothing
  // stays running.
  await step('startFails', async () => {
    await Template.build(Template().fromTemplate('code-interpreter-v1').setStartCmd('echo boom >&2; exit 3', waitForFile('/tmp/never')), 'e2e-start-fails')
    const count = async () => (await (await fetch(`${api}/sandboxes`, { headers })).json()).length
    const before = await count()
    let message = ''
    try {
      const s3 = await Sandbox.create('e2e-start-fails', { timeoutMs: 60_000 })
      await s3.kill()
    } catch (e) {
      message = String(e?.message ?? e)
    }
    const after = await count()
    for (const name of ['e2e-start', 'e2e-start-fails']) {
      const res = await fetch(`${api}/templates/${name}`, { headers })
      const id = (await res.json()).templateID
      if (id) await fetch(`${api}/templates/${id}`, { method: 'DELETE', headers })
    }
    return { message, before, after }
  })

  // An unsupported step fails the build with the reason.
  await step('refused', async () => {
    await Template.build(Template().fromImage('python:3.12', { username: 'u', password: 'p' }), 'e2e-tpl-refused')
    return { built: true }
  })

  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, steps, error: String(e?.stack ?? e) }))
} finally {
  await sbx?.kill().catch(() => {})
}
