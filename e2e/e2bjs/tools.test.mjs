// Code mode through `code-sandboxes serve` with the OFFICIAL E2B JS SDK,
// unmodified: the SDK can't register functions nor send our create-body
// extension, so the sandbox is granted serve's tool set "mcptest" through
// the metadata key code-sandboxes/tools, and its code calls the tools.
// Prints one JSON object on stdout ({ok, steps, error?}); the Go test
// (internal/e2bserver/tools_test.go) asserts on it.
import { Sandbox } from '@e2b/code-interpreter'

const steps = {}
let sbx

async function step(name, fn) {
  try {
    steps[name] = await fn()
  } catch (e) {
    steps[name] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
}

const out = (ex) => ({ stdout: ex.logs.stdout.join(''), error: ex.error ? `${ex.error.name}: ${ex.error.value}` : null })

try {
  sbx = await Sandbox.create({ metadata: { 'code-sandboxes/tools': 'mcptest' }, timeoutMs: 120_000 })
  steps.create = { sandboxId: sbx.sandboxId }
  await step('loop', async () => out(await sbx.runCode(
    'import tools\nprint(sum(tools.word_count(text="a " * i)["words"] for i in range(1000)))')))
  await step('toolError', async () => out(await sbx.runCode('import tools\ntools.fail()')))
  await step('ungranted', async () => out(await sbx.runCode('import tools\ntools.call("secret")')))
  await step('oversized', async () => out(await sbx.runCode('import tools\ntools.shout(text="x" * (2 << 20))')))
  // PROBE is host:port of a listener the Go test opened on one of the
  // host's own addresses: network none must not reach it.
  const [host, port] = [process.env.PROBE.slice(0, process.env.PROBE.lastIndexOf(':')), process.env.PROBE.slice(process.env.PROBE.lastIndexOf(':') + 1)]
  await step('network', async () => out(await sbx.runCode(
    `import socket\ntry:\n    socket.create_connection((${JSON.stringify(host.replace(/^\[|\]$/g, ''))}, ${Number(port)}), timeout=2)\n    print("connected")\nexcept OSError as e:\n    print("no network:", type(e).__name__)`)))
  await step('badGrant', async () => {
    try {
      const other = await Sandbox.create({ metadata: { 'code-sandboxes/tools': 'nosuchset' } })
      await other.kill()
      return { created: true }
    } catch (e) {
      return { thrown: e?.constructor?.name, message: String(e?.message ?? e) }
    }
  })
  await sbx.kill()
  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  if (sbx) await sbx.kill().catch(() => {})
  console.log(JSON.stringify({ ok: false, steps, error: String(e?.stack ?? e) }))
}
