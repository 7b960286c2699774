// Drives `code-sandboxes serve`'s network options with the OFFICIAL E2B JS
// SDK, unmodified: allowOut/denyOut at create (the selector callback form
// included), getInfo's network, updateNetwork on the running sandbox, and
// the refusals. The sandboxes reach the Go test's own internet (TESTNET_IP
// serves HTTP on :80, TESTNET_NAME and TESTNET_OTHER resolve to it).
// Prints one JSON object on stdout ({ok, steps, error?}); the Go test
// (internal/e2bserver/network_test.go) asserts on it.
import { Sandbox, SandboxNotFoundError } from '@e2b/code-interpreter'

const ip = process.env.TESTNET_IP
const name = process.env.TESTNET_NAME
const other = process.env.TESTNET_OTHER
const steps = {}
let sbx

async function step(k, fn) {
  try {
    steps[k] = await fn()
  } catch (e) {
    steps[k] = { thrown: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) }
  }
}

// get fetches http://<host>/ with Host <hdr> from inside the sandbox: the
// server's body, or err:<exception class>.
async function get(host, hdr) {
  const ex = await sbx.runCode(`
import socket
def get(host, hdr):
    try:
        s = socket.create_connection((host, 80), timeout=10)
        s.sendall(("GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % hdr).encode())
        out = b""
        while True:
            d = s.recv(4096)
            if not d: break
            out += d
        return out.decode(errors="replace").split("\\r\\n\\r\\n")[-1].strip()
    except Exception as e:
        return "err:" + type(e).__name__
print(get(${JSON.stringify(host)}, ${JSON.stringify(hdr)}))
`)
  if (ex.error) return `error:${ex.error.name}`
  return ex.logs.stdout.join('').trim()
}

try {
  sbx = await Sandbox.create({
    timeoutMs: 120_000,
    network: { allowOut: [name], denyOut: ({ allTraffic }) => [allTraffic] },
  })
  steps.create = { sandboxId: sbx.sandboxId }

  await step('allowName', async () => ({
    byName: await get(name, name),
    byIP: await get(ip, ip),
    hostGame: await get(ip, other),
  }))

  await step('info', async () => {
    const i = await sbx.getInfo()
    return { allowInternetAccess: i.allowInternetAccess ?? null, network: i.network ?? null }
  })

  await step('updateToIP', async () => {
    await sbx.updateNetwork({ allowOut: [ip], denyOut: ({ allTraffic }) => [allTraffic] })
    return { byIP: await get(ip, ip), hostGame: await get(ip, other) }
  })

  await step('updateDenyIP', async () => {
    await sbx.updateNetwork({ denyOut: [ip] })
    return { byIP: await get(ip, ip), byName: await get(name, name) }
  })

  await step('updateCleared', async () => {
    await sbx.updateNetwork({})
    return { byIP: await get(ip, ip), hostGame: await get(ip, other) }
  })

  await step('updateNoInternet', async () => {
    await sbx.updateNetwork({ allowInternetAccess: false })
    return { byIP: await get(ip, ip) }
  })

  await step('updateMissing', async () => {
    await Sandbox.updateNetwork('lzzzzzzzzzzzzzzzz', {})
    return { thrown: null }
  })

  await step('denyDomain', async () => {
    const s = await Sandbox.create({ network: { denyOut: ['example.com'] } })
    await s.kill()
    return { thrown: null }
  })

  await step('rules', async () => {
    const s = await Sandbox.create({
      network: {
        allowOut: [name],
        denyOut: ({ allTraffic }) => [allTraffic],
        rules: { [name]: [{ transform: { headers: { Authorization: 'Bearer s3cret' } } }] },
      },
    })
    await s.kill()
    return { thrown: null }
  })

  steps.notFoundClass = SandboxNotFoundError.name
  console.log(JSON.stringify({ ok: true, steps }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e?.stack ?? e), steps }))
} finally {
  if (sbx) await sbx.kill().catch(() => {})
}
