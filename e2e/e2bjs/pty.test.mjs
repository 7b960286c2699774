// Issue #42's terminals through the OFFICIAL E2B JS SDK against
// `code-sandboxes serve`: sandbox.pty create (size, envs, cwd), sendInput,
// resize, connect by pid, kill, and a shell's own exit status. Same
// contract as sdk.test.mjs: one JSON line ({ok, steps, error?}) on stdout;
// the Go test (internal/e2bserver/e2bjs_pty_test.go) asserts on it.
import { Sandbox } from 'e2b'

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
const enc = new TextEncoder()
const dec = new TextDecoder()

// A terminal whose output is collected, and waited on with a bound.
async function open(opts) {
  let out = ''
  const h = await sbx.pty.create({ cols: 100, rows: 30, timeoutMs: 120_000, ...opts, onData: (d) => { out += dec.decode(d) } })
  const until = async (want, ms = 30_000) => {
    for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) {
      if (out.includes(want)) return true
    }
    return false
  }
  return { h, until, out: () => out }
}

try {
  sbx = await Sandbox.create({ timeoutMs: 180_000 })

  await step('create', async () => {
    const t = await open({ envs: { CS_PTY: 'env-ok' }, cwd: '/tmp' })
    await sbx.pty.sendInput(t.h.pid, enc.encode('echo $((6*7)) $CS_PTY $(pwd) $TERM; stty size\n'))
    const first = await t.until('42 env-ok /tmp xterm-256color\r\n30 100\r\n')
    await sbx.pty.resize(t.h.pid, { cols: 120, rows: 50 })
    await sbx.pty.sendInput(t.h.pid, enc.encode('stty size\n'))
    const resized = await t.until('50 120\r\n')
    // ^C interrupts the foreground job, not the shell.
    await sbx.pty.sendInput(t.h.pid, enc.encode('sleep 60; echo slept\n'))
    await sleep(1_000)
    await sbx.pty.sendInput(t.h.pid, enc.encode('\x03'))
    await sbx.pty.sendInput(t.h.pid, enc.encode('echo after-$((1+2))\n'))
    const interrupted = await t.until('after-3\r\n', 20_000)
    await sbx.pty.sendInput(t.h.pid, enc.encode('exit 3\n'))
    let exitCode = null
    try {
      const r = await t.h.wait()
      exitCode = r.exitCode
    } catch (e) {
      exitCode = e?.exitCode ?? null
    }
    return { first, resized, interrupted, exitCode, out: t.out().slice(-2000) }
  })

  await step('connectAndKill', async () => {
    const t = await open({})
    let out2 = ''
    const again = await sbx.pty.connect(t.h.pid, { onData: (d) => { out2 += dec.decode(d) }, timeoutMs: 120_000 })
    await sbx.pty.sendInput(t.h.pid, enc.encode('echo conn-$((2*5))\n'))
    const seenFirst = await t.until('conn-10\r\n')
    let seenSecond = false
    for (const end = Date.now() + 30_000; Date.now() < end && !seenSecond; await sleep(50)) seenSecond = out2.includes('conn-10\r\n')
    const killed = await sbx.pty.kill(t.h.pid)
    const killedAgain = await sbx.pty.kill(t.h.pid)
    let ended = null
    try {
      ended = (await t.h.wait()).exitCode
    } catch (e) {
      ended = e?.exitCode ?? e?.constructor?.name ?? null
    }
    await again.disconnect?.()
    return { seenFirst, seenSecond, killed, killedAgain, ended }
  })

  await sbx.kill()
  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  if (sbx) await sbx.kill().catch(() => {})
  console.log(JSON.stringify({ ok: false, error: `${e?.constructor?.name}: ${e?.stack ?? e}`, steps }))
  process.exitCode = 1
}
process.exit()
