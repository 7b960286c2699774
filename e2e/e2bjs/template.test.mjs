// Drives `code-sandboxes serve --template-builds` with the OFFICIAL E2B JS
// SDK's Template builder, unmodified: build a template with apt, pip, copy
// and run steps, create a sandbox on it, run code, then rebuild, list and
// delete. Needs E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and PIP_INDEX (a
// package index on loopback serving cs-tpl 1.0). Prints one JSON object
// ({ok, steps, error?}); internal/e2bserver/templates_test.go asserts on it.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template } from 'e2b'
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

  // An unsupported step fails the build with the reason.
  await step('refused', async () => {
    await Template.build(Template().fromTemplate('base').setStartCmd('python3 -m http.server', 'sleep 1'), 'e2e-tpl-refused')
    return { built: true }
  })

  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, steps, error: String(e?.stack ?? e) }))
} finally {
  await sbx?.kill().catch(() => {})
}
