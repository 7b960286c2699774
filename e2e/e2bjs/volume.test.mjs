// Drives `code-sandboxes serve`'s volumes with the OFFICIAL E2B JS SDK,
// unmodified: Volume.create/list/getInfo/connect/destroy, the volume's own
// file calls (writeFile, readFile, list, makeDir, getInfo, exists,
// updateMetadata, remove), and volumeMounts at Sandbox.create. Prints one
// JSON object on stdout ({ok, steps, error?}); the Go test
// (internal/e2bserver/volumes_test.go, TestOfficialJSSDKVolume) asserts on
// it, so every step records what it observed rather than judging it here.
import { Sandbox } from '@e2b/code-interpreter'
import { Volume } from 'e2b'

const steps = {}
const made = []

async function step(name, fn) {
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
}

let vol
try {
  await step('create', async () => {
    vol = await Volume.create('jsvol')
    return { id: vol.volumeId, name: vol.name, hasToken: vol.token.length > 0 }
  })
  await step('list', async () => (await Volume.list()).map((v) => v.name))
  await step('getInfo', async () => {
    const i = await Volume.getInfo(vol.volumeId)
    return { name: i.name, sameToken: i.token === vol.token }
  })
  await step('connect', async () => {
    const c = await Volume.connect(vol.volumeId)
    return { name: c.name, id: c.volumeId }
  })
  await step('files', async () => {
    const w = await vol.writeFile('/dir/a.txt', 'hello volume')
    const read = await vol.readFile('/dir/a.txt')
    const d = await vol.makeDir('/d2/sub', { force: true })
    const info = await vol.getInfo('/dir/a.txt')
    const meta = await vol.updateMetadata('/dir/a.txt', { mode: 0o600 })
    const root = (await vol.list('/')).map((e) => `${e.name}:${e.type}`)
    const deep = (await vol.list('/', { depth: 3 })).map((e) => e.path)
    await vol.remove('/d2')
    return {
      written: { path: w.path, size: w.size, type: w.type },
      read,
      dir: d.type,
      info: { size: info.size, type: info.type, mtimeIsDate: info.mtime instanceof Date },
      mode: meta.mode,
      root,
      deep,
      d2Gone: !(await vol.exists('/d2')),
      exists: await vol.exists('/dir/a.txt'),
    }
  })
  await step('missing', async () => {
    try {
      await vol.readFile('/nope')
      return { thrown: '' }
    } catch (e) {
      return { error: e?.constructor?.name }
    }
  })
  let sbx
  await step('mount', async () => {
    sbx = await Sandbox.create({ volumeMounts: { '/mnt/vol': vol }, timeoutMs: 120_000 })
    made.push(sbx)
    await vol.writeFile('/shared.txt', 'from the API')
    const inSandbox = await sbx.files.read('/mnt/vol/shared.txt')
    await sbx.commands.run('echo from the sandbox > /mnt/vol/from-sbx.txt')
    const fromSandbox = await vol.readFile('/from-sbx.txt')
    const info = await sbx.getInfo()
    return { inSandbox, fromSandbox, mounts: info.volumeMounts }
  })
  await step('destroyInUse', async () => {
    try {
      return { destroyed: await Volume.destroy(vol.volumeId) }
    } catch (e) {
      return { error: e?.constructor?.name, message: String(e?.message ?? e) }
    }
  })
  await step('destroy', async () => {
    await sbx.kill()
    made.pop()
    const first = await Volume.destroy(vol.volumeId)
    const again = await Volume.destroy(vol.volumeId)
    let after = ''
    try {
      await Volume.getInfo(vol.volumeId)
    } catch (e) {
      after = e?.constructor?.name
    }
    return { first, again, after }
  })
  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, steps, error: String(e?.stack ?? e) }))
} finally {
  for (const s of made) await s.kill().catch(() => {})
}
