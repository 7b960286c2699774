// Drives `code-sandboxes serve --isolation gvisor`'s pause, resume,
// connect, snapshots, fork and lifecycle (auto-pause) with the OFFICIAL E2B
// JS SDKs, unmodified. Prints one JSON object on stdout ({ok, steps,
// error?}); the Go test (internal/e2bserver/e2bjs_pause_test.go) asserts on
// it, so every step records what it observed rather than judging it here.
import { Sandbox } from '@e2b/code-interpreter'

const steps = {}
const timings = {}
const made = []

async function step(name, fn) {
  const t0 = Date.now()
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
  timings[name] = Date.now() - t0
}

const text = (ex) => ex.error ? `error:${ex.error.name}` : (ex.text ?? ex.logs.stdout.join(''))
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function waitState(sb, want, ms) {
  const end = Date.now() + ms
  let st
  while (Date.now() < end) {
    st = (await sb.getInfo()).state
    if (st === want) return st
    await sleep(200)
  }
  return st
}

try {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, allowInternetAccess: false })
  made.push(sbx)
  steps.create = { sandboxId: sbx.sandboxId }

  await step('state', async () => {
    await sbx.runCode('x = 40')
    await sbx.files.write('/home/user/f.txt', 'before')
    const cmd = await sbx.commands.run('sleep 3600', { background: true })
    return { pid: cmd.pid }
  })
  await step('pause', async () => {
    const paused = await sbx.pause()
    const again = await Sandbox.pause(sbx.sandboxId)
    return { paused, again, running: await sbx.isRunning(), state: (await sbx.getInfo()).state }
  })
  await step('connect', async () => {
    const same = await sbx.connect()
    const list = await sbx.commands.list()
    return {
      sameId: same.sandboxId === sbx.sandboxId,
      running: await sbx.isRunning(),
      x: text(await sbx.runCode('x + 2')),
      file: await sbx.files.read('/home/user/f.txt'),
      pids: list.map((c) => c.pid),
    }
  })
  let snap
  await step('snapshot', async () => {
    snap = await sbx.createSnapshot({ name: 'e2e-snap' })
    const all = await Sandbox.listSnapshots().nextItems()
    const mine = await sbx.listSnapshots().nextItems()
    return {
      snapshotId: snap.snapshotId, names: snap.names, running: await sbx.isRunning(),
      listed: all.map((s) => s.snapshotId), mine: mine.map((s) => s.snapshotId),
    }
  })
  await step('fromSnapshot', async () => {
    const f = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
    made.push(f)
    await f.files.write('/home/user/f.txt', 'changed in the copy')
    const r = {
      id: f.sandboxId, x: text(await f.runCode('x + 2')),
      original: await sbx.files.read('/home/user/f.txt'),
    }
    await f.kill()
    return r
  })
  await step('fork', async () => {
    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    const out = []
    for (const f of forks) {
      if (f instanceof Error) {
        out.push({ error: String(f.message) })
        continue
      }
      made.push(f)
      out.push({ id: f.sandboxId, running: await f.isRunning(), x: text(await f.runCode('x + 2')), file: await f.files.read('/home/user/f.txt') })
      await f.kill()
    }
    return { forks: out, source: text(await sbx.runCode('x')) }
  })
  await step('deleteSnapshot', async () => ({
    first: await Sandbox.deleteSnapshot(snap.snapshotId),
    second: await Sandbox.deleteSnapshot(snap.snapshotId),
    listed: (await Sandbox.listSnapshots().nextItems()).length,
  }))
  await step('autoPause', async () => {
    const a = await Sandbox.create({ timeoutMs: 10_000, allowInternetAccess: false, lifecycle: { onTimeout: 'pause', autoResume: false } })
    made.push(a)
    await a.runCode('y = 1')
    const info = await a.getInfo()
    const state = await waitState(a, 'paused', 60_000)
    const running = await a.isRunning()
    await a.connect()
    const r = { lifecycle: info.lifecycle, state, running, after: (await a.getInfo()).state, y: text(await a.runCode('y + 1')) }
    await a.kill()
    return r
  })
  await step('keepMemoryFalse', async () => {
    try {
      const b = await Sandbox.create({ allowInternetAccess: false, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
      made.push(b)
      return { created: true }
    } catch (e) {
      return { refused: e?.constructor?.name, message: String(e?.message) }
    }
  })
  await step('pauseKeepMemoryFalse', async () => {
    try {
      await sbx.pause({ keepMemory: false })
      return { paused: true }
    } catch (e) {
      return { refused: e?.constructor?.name, message: String(e?.message) }
    }
  })
  await sbx.kill()
  console.log(JSON.stringify({ ok: true, steps, timings }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: `${e?.constructor?.name}: ${e?.stack ?? e}`, steps, timings }))
  process.exitCode = 1
}
for (const s of made) await s.kill().catch(() => {})
process.exit()
