// Load test: several teams (one API key each) create, use and kill
// sandboxes concurrently through the OFFICIAL E2B JS SDK against
// `code-sandboxes serve`, and check that no team ever sees another's.
// Env: E2B_API_URL, E2B_SANDBOX_URL, LOAD_KEYS (comma-separated, one per
// team), LOAD_PER_TEAM, LOAD_CONCURRENCY. Prints one JSON object on stdout;
// the Go test (internal/e2bserver/load_test.go) judges it.
import http from 'node:http'
import { Sandbox, SandboxNotFoundError } from '@e2b/code-interpreter'

const keys = process.env.LOAD_KEYS.split(',')
const perTeam = Number(process.env.LOAD_PER_TEAM ?? 25)
const concurrency = Number(process.env.LOAD_CONCURRENCY ?? 8)
const api = new URL(process.env.E2B_SANDBOX_URL)

const errors = []
const crossTeam = [] // any sign of another team's sandbox
const ids = keys.map(() => new Set()) // sandbox ids per team, as created
const timings = { create: [], runCode: [], files: [], tunnel: [], kill: [] }
let created = 0
let killed = 0

function fetchVia(host, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: api.hostname, port: api.port, path, headers: { Host: host } }, (r) => {
      let body = ''
      r.on('data', (c) => (body += c))
      r.on('end', () => resolve({ status: r.statusCode, body }))
    })
    req.setTimeout(30_000, () => req.destroy(new Error('tunnel request timed out')))
    req.on('error', reject)
  })
}

async function timed(name, fn) {
  const t0 = performance.now()
  const v = await fn()
  timings[name].push(performance.now() - t0)
  return v
}

async function one(team, n) {
  const apiKey = keys[team]
  let sbx
  try {
    sbx = await timed('create', () => Sandbox.create({ apiKey, metadata: { team: String(team), n: String(n) }, timeoutMs: 600_000 }))
    ids[team].add(sbx.sandboxId)
    created++
    const ex = await timed('runCode', () => sbx.runCode(`x = ${n}\nx + 2`))
    if (ex.text !== String(n + 2)) throw new Error(`runCode: ${ex.text} ${ex.error?.name ?? ''}`)
    await timed('files', async () => {
      await sbx.files.write('/home/user/n.txt', `team ${team} sandbox ${n}`)
      const back = await sbx.files.read('/home/user/n.txt')
      if (back !== `team ${team} sandbox ${n}`) throw new Error(`files: read back ${back}`)
    })
    await timed('tunnel', async () => {
      await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true, cwd: '/home/user' })
      await sbx.commands.run('for i in $(seq 200); do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8000))" 2>/dev/null && break; sleep 0.05; done')
      const res = await fetchVia(sbx.getHost(8000), '/n.txt')
      if (res.status !== 200 || res.body !== `team ${team} sandbox ${n}`) throw new Error(`tunnel: ${res.status} ${res.body.slice(0, 200)}`)
    })
    // Cross-team: the team's listing holds none of another team's ids,
    // and another team's sandbox is "not found" for this key.
    const listed = await Sandbox.list({ apiKey, limit: 100 }).nextItems()
    for (const s of listed) {
      for (let o = 0; o < keys.length; o++) {
        if (o !== team && ids[o].has(s.sandboxId)) crossTeam.push({ team, sees: s.sandboxId, of: o, how: 'list' })
      }
    }
    const other = (team + 1) % keys.length
    const theirs = [...ids[other]][0]
    if (theirs) {
      try {
        await Sandbox.getInfo(theirs, { apiKey })
        crossTeam.push({ team, sees: theirs, of: other, how: 'getInfo' })
      } catch (e) {
        if (!(e instanceof SandboxNotFoundError)) throw e
      }
      try {
        await Sandbox.connect(theirs, { apiKey })
        crossTeam.push({ team, sees: theirs, of: other, how: 'connect' })
      } catch (e) {
        if (!(e instanceof SandboxNotFoundError) && !/not found/i.test(String(e?.message))) throw e
      }
      if (await Sandbox.kill(theirs, { apiKey })) crossTeam.push({ team, sees: theirs, of: other, how: 'kill' })
    }
  } catch (e) {
    errors.push({ team, n, error: `${e?.constructor?.name}: ${String(e?.message ?? e).slice(0, 300)}` })
  } finally {
    if (sbx) {
      try {
        if (await timed('kill', () => sbx.kill())) killed++
        else errors.push({ team, n, error: 'kill: the sandbox was already gone' })
      } catch (e) {
        errors.push({ team, n, error: `kill: ${String(e?.message ?? e)}` })
      }
    }
  }
}

const jobs = []
for (let n = 0; n < perTeam; n++) for (let team = 0; team < keys.length; team++) jobs.push([team, n])
const t0 = performance.now()
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (jobs.length) {
    const [team, n] = jobs.shift()
    await one(team, n)
  }
}))
const wallMs = performance.now() - t0
const left = []
for (const k of keys) left.push(...(await Sandbox.list({ apiKey: k, limit: 100 }).nextItems()).map((s) => s.sandboxId))

const pct = (a, p) => (a.length ? [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(a.length * p))] : null)
const summary = Object.fromEntries(Object.entries(timings).map(([k, v]) => [k, { n: v.length, p50: pct(v, 0.5), p95: pct(v, 0.95) }]))
console.log(JSON.stringify({ teams: keys.length, perTeam, concurrency, created, killed, errors, crossTeam, left, wallMs, timings: summary }))
