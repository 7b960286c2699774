# Other languages: where TypeScript may be and the node, R and Java driver programs.
#
# A context whose language is not Python still runs this kernel, which keeps
# the framing, ordering, bounds and interrupt handling; the cells go to a
# persistent interpreter child (bash, node) that shares fds 1 and 2, so its
# output streams live and in order. Each child gets a private command pipe
# and status pipe; stdin is /dev/null so a cell reading stdin can't eat the
# commands. SIGINT reaches the child too (Go signals the kernel's process
# group): bash returns from the cell, node interrupts the running script or
# abandons the awaited promise; both then report the cell as done.

# Where the typescript package may be (Debian's node-typescript first); the
# Go side (languages.go, TypeScriptLibs) checks the same list.
_TS_LIBS = ("/usr/share/nodejs/typescript", "/usr/lib/node_modules/typescript", "/usr/local/lib/node_modules/typescript")


def _ts_lib():
    for d in _TS_LIBS:
        if os.path.isfile(os.path.join(d, "lib", "typescript.js")):
            return d
    return None


_JS_DRIVER = r"""
'use strict'
const fs = require('fs'), repl = require('repl'), vm = require('vm'), util = require('util')
const { PassThrough } = require('stream')
const cmdFd = Number(process.env.CS_CMD_FD), stFd = Number(process.env.CS_ST_FD)
delete process.env.CS_CMD_FD; delete process.env.CS_ST_FD
const r = repl.start({ input: new PassThrough(), output: new PassThrough(), terminal: false, useGlobal: true, prompt: '' })
let pending = null
const settle = (v) => { if (pending) { const p = pending; pending = null; p(v) } }
r._domain.removeAllListeners('error')
r._domain.on('error', (e) => { if (pending) settle([e]); else process.stderr.write('Uncaught ' + util.inspect(e) + '\n') })
process.on('uncaughtException', (e) => { if (pending) settle([e]); else process.stderr.write('Uncaught ' + util.inspect(e) + '\n') })
process.on('unhandledRejection', (e) => { process.stderr.write('Unhandled rejection: ' + util.inspect(e) + '\n') })
process.on('SIGINT', () => settle([Object.assign(new Error('interrupted'), { name: 'KeyboardInterrupt' })]))
const send = (o) => fs.writeSync(stFd, JSON.stringify(o) + '\n')
// Static imports become dynamic ones (a REPL-style cell is a script).
let nmod = 0
function imports(code) {
  return code.replace(/^[ \t]*import\s+(?:([\w$]+)\s*,?\s*)?(?:(\*\s+as\s+[\w$]+)|(\{[^}]*\}))?\s*(?:from\s*)?(['"][^'"]+['"])\s*;?[ \t]*$/gm,
    (m, def, star, named, src) => {
      // var: a cell that imports again (re-run) must not fail on redeclaration.
      const tmp = '__cs_mod' + (nmod++)
      const out = ['var ' + tmp + ' = await import(' + src + ');']
      if (def) out.push('var ' + def + ' = ' + tmp + '.default;')
      if (star) out.push('var ' + star.replace(/^\*\s+as\s+/, '') + ' = ' + tmp + ';')
      if (named) out.push('var ' + named.replace(/([\w$]+)\s+as\s+([\w$]+)/g, '$1: $2') + ' = ' + tmp + ';')
      return out.join(' ')
    })
}
// TypeScript (CS_TS_LIB): each cell transpiled on its own, as a script
// with ES module syntax (the imports then become dynamic ones above), every
// import kept (a cell may import for a later one); syntax errors are the
// cell's SyntaxError. Types are not checked, as with node's type stripping.
let ts = null
if (process.env.CS_TS_LIB) { ts = require(process.env.CS_TS_LIB); delete process.env.CS_TS_LIB }
function transpile(code) {
  if (!ts) return code
  const out = ts.transpileModule(code, { reportDiagnostics: true, fileName: 'cell.ts', compilerOptions: {
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, isolatedModules: true,
    preserveValueImports: true, importsNotUsedAsValues: ts.ImportsNotUsedAsValues.Preserve } })
  const d = (out.diagnostics || []).filter((x) => x.category === ts.DiagnosticCategory.Error)
  if (d.length) {
    const pos = d[0].file && d[0].start !== undefined ? d[0].file.getLineAndCharacterOfPosition(d[0].start) : null
    throw new SyntaxError(ts.flattenDiagnosticMessageText(d[0].messageText, '\n') + (pos ? ' (cell:' + (pos.line + 1) + ':' + (pos.character + 1) + ')' : ''))
  }
  return out.outputText
}
function run(code) {
  try { code = transpile(code) } catch (e) { return Promise.resolve([e]) }
  code = imports(code)
  if (!/\bawait\b/.test(code)) {
    try { return Promise.resolve([null, new vm.Script(code, { filename: 'cell' }).runInThisContext({ breakOnSigint: true })]) } catch (e) { return Promise.resolve([e]) }
  }
  return new Promise((res) => { pending = res; r.eval(code, r.context, 'cell', (err, v) => { if (pending === res) settle([err, v]) }) })
}
let buf = Buffer.alloc(0), busy = false
const queue = []
async function loop() {
  if (busy) return
  busy = true
  while (queue.length) {
    const msg = queue.shift()
    const saved = {}
    for (const [k, v] of Object.entries(msg.env || {})) { saved[k] = process.env[k]; process.env[k] = v }
    const [err, val] = await run(msg.code)
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v }
    if (err) {
      const e = err instanceof Error ? err : new Error(util.inspect(err))
      send({ id: msg.id, t: 'error', name: e.name || 'Error', value: e.message || String(err), tb: String(e.stack || e) })
    } else if (val !== undefined) {
      send({ id: msg.id, t: 'result', text: util.inspect(val) })
    }
    send({ id: msg.id, t: 'done' })
  }
  busy = false
}
fs.createReadStream(null, { fd: cmdFd }).on('data', (d) => {
  buf = Buffer.concat([buf, d])
  while (buf.length >= 4) {
    const n = buf.readUInt32BE(0)
    if (buf.length < 4 + n) break
    queue.push(JSON.parse(buf.subarray(4, 4 + n).toString('utf8')))
    buf = buf.subarray(4 + n)
  }
  loop()
}).on('end', () => process.exit(0))
"""


_R_DRIVER = r"""
local({
  cmd <- file(paste0("/proc/self/fd/", Sys.getenv("CS_CMD_FD")), "r")
  st <- file(paste0("/proc/self/fd/", Sys.getenv("CS_ST_FD")), "w")
  Sys.unsetenv(c("CS_CMD_FD", "CS_ST_FD"))
  hex <- function(s) {
    b <- charToRaw(enc2utf8(paste(s, collapse = "\n")))
    if (length(b) == 0) "-" else paste(as.character(b), collapse = "")
  }
  unhex <- function(h) {
    if (h == "-" || nchar(h) == 0) return("")
    rawToChar(as.raw(strtoi(substring(h, seq(1, nchar(h), 2), seq(2, nchar(h), 2)), 16L)))
  }
  send <- function(...) {
    flush(stdout()); flush(stderr())
    cat(paste(...), "\n", sep = "", file = st); flush(st)
  }
  repeat {
    line <- readLines(cmd, n = 1)
    if (length(line) == 0) quit(save = "no", status = 0)
    f <- strsplit(line, " ", fixed = TRUE)[[1]]
    id <- f[1]
    saved <- list()
    if (f[3] != "-") {
      for (kv in readLines(f[3])) {
        k <- sub("=.*", "", kv)
        saved[k] <- list(Sys.getenv(k, unset = NA))
        do.call(Sys.setenv, stats::setNames(list(unhex(sub("^[^=]*=", "", kv))), k))
      }
    }
    tryCatch(withCallingHandlers({
      exprs <- parse(file = f[2], keep.source = FALSE)
      n <- length(exprs)
      for (i in seq_len(n)) {
        r <- withVisible(eval(exprs[[i]], envir = globalenv()))
        if (r$visible) {
          if (i == n) send(id, "result", hex(utils::capture.output(print(r$value))))
          else print(r$value)
        }
      }
    }, warning = function(w) {
      message("Warning message:\n", conditionMessage(w))
      invokeRestart("muffleWarning")
    }), error = function(e) {
      send(id, "error", hex(conditionMessage(e)), hex(deparse(conditionCall(e))))
    }, interrupt = function(e) {
      send(id, "interrupt")
    })
    for (k in names(saved)) {
      if (is.na(saved[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, stats::setNames(list(saved[[k]]), k))
    }
    send(id, "done")
  }
})
"""


# Java: one JVM running JShell's API with the local execution engine (state
# between cells). The same line protocol as R's: "<id> <cell file> <env
# file|->" in; "<id> result <hex>", "<id> error <hex name> <hex message>
# <hex traceback>", "<id> interrupt", "<id> done" out. During a cell,
# System.out/err send each write as "<id> out <1|2> <hex>" (at most 32 KiB
# of it a line), which the kernel turns into one output chunk each: E2B's
# Java kernel (IJava) sends every write of its PrintStream as a message of
# its own, so println's text and its newline are two chunks there (its
# tests check stdout[0] == the line). Between cells (a thread left running)
# they write to fds 1 and 2. The sandbox's and the cell's variables are also
# system properties (System.getProperty), as on E2B's Java kernel; SIGINT
# stops the running snippet.
_JAVA_DRIVER = r"""import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import jdk.jshell.*;

public class Driver {
  static PrintStream st;
  static String hex(String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length == 0) return "-";
    StringBuilder sb = new StringBuilder();
    for (byte x : b) sb.append(String.format("%02x", x & 0xff));
    return sb.toString();
  }
  static String unhex(String h) {
    if (h.equals("-") || h.isEmpty()) return "";
    byte[] b = new byte[h.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
    return new String(b, StandardCharsets.UTF_8);
  }
  static void send(String... parts) {
    System.out.flush(); System.err.flush();
    synchronized (Driver.class) { st.print(String.join(" ", parts) + "\n"); st.flush(); }
  }
  // The running cell's id; null between cells.
  static volatile String cell = null;
  // A PrintStream of a subclass: its println writes the text, then the
  // newline (a plain PrintStream of JDK 17 and later writes both at once),
  // as the PrintStream of IJava's JDK 11 does.
  static final class CellPrint extends PrintStream {
    CellPrint(OutputStream o) { super(o, true, StandardCharsets.UTF_8); }
  }
  // CellOut: System.out/err during a cell, a status line per write.
  static final class CellOut extends OutputStream {
    final String fd;
    final FileOutputStream raw;
    CellOut(String fd, FileDescriptor d) { this.fd = fd; this.raw = new FileOutputStream(d); }
    @Override public void write(int b) throws IOException { write(new byte[] {(byte) b}, 0, 1); }
    @Override public void write(byte[] b, int off, int len) throws IOException {
      String id = cell;
      if (id == null) { raw.write(b, off, len); return; }
      for (int i = 0; i < len; i += 32768) {
        int n = Math.min(32768, len - i);
        StringBuilder sb = new StringBuilder(2 * n + 16).append(id).append(" out ").append(fd).append(' ');
        for (int j = off + i; j < off + i + n; j++) { sb.append(Character.forDigit((b[j] >> 4) & 0xf, 16)).append(Character.forDigit(b[j] & 0xf, 16)); }
        sb.append('\n');
        synchronized (Driver.class) { st.print(sb); st.flush(); }
      }
    }
  }
  static String unquote(String v) {
    if (v == null || v.length() < 2 || !v.startsWith("\"") || !v.endsWith("\"")) return v;
    StringBuilder sb = new StringBuilder();
    for (int i = 1; i < v.length() - 1; i++) {
      char c = v.charAt(i);
      if (c == '\\' && i + 1 < v.length() - 1) {
        char n = v.charAt(++i);
        switch (n) { case 'n': sb.append('\n'); break; case 't': sb.append('\t'); break; case 'r': sb.append('\r'); break;
          case 'b': sb.append('\b'); break; case 'f': sb.append('\f'); break; default: sb.append(n); }
      } else sb.append(c);
    }
    return sb.toString();
  }
  static volatile boolean running = false;
  public static void main(String[] a) throws Exception {
    BufferedReader cmd = new BufferedReader(new InputStreamReader(new FileInputStream("/proc/self/fd/" + System.getenv("CS_CMD_FD")), StandardCharsets.UTF_8));
    st = new PrintStream(new FileOutputStream("/proc/self/fd/" + System.getenv("CS_ST_FD")), false, StandardCharsets.UTF_8);
    // The sandbox's variables are system properties too, as on E2B's Java kernel.
    for (Map.Entry<String, String> e : System.getenv().entrySet())
      if (!e.getKey().startsWith("CS_") && System.getProperty(e.getKey()) == null) System.setProperty(e.getKey(), e.getValue());
    System.setOut(new CellPrint(new CellOut("1", FileDescriptor.out)));
    System.setErr(new CellPrint(new CellOut("2", FileDescriptor.err)));
    JShell js = JShell.builder().executionEngine("local").out(System.out).err(System.err).build();
    sun.misc.Signal.handle(new sun.misc.Signal("INT"), s -> { if (running) js.stop(); });
    SourceCodeAnalysis sca = js.sourceCodeAnalysis();
    String line;
    while ((line = cmd.readLine()) != null) {
      String[] f = line.split(" ");
      String id = f[0];
      Map<String, String> saved = new HashMap<>();
      if (!f[2].equals("-")) {
        for (String kv : Files.readAllLines(Paths.get(f[2]))) {
          int eq = kv.indexOf('=');
          if (eq < 0) continue;
          String k = kv.substring(0, eq);
          saved.put(k, System.getProperty(k));
          System.setProperty(k, unhex(kv.substring(eq + 1)));
        }
      }
      String rest = new String(Files.readAllBytes(Paths.get(f[1])), StandardCharsets.UTF_8);
      String value = null;
      boolean failed = false;
      cell = id;
      running = true;
      try {
        while (!rest.isBlank() && !failed) {
          SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
          String src = ci.source();
          if (ci.completeness() == SourceCodeAnalysis.Completeness.EMPTY) break;
          if (src == null || !ci.completeness().isComplete()) { src = rest; rest = ""; } else rest = ci.remaining();
          value = null;
          for (SnippetEvent ev : js.eval(src)) {
            if (ev.causeSnippet() != null) continue;
            if (ev.exception() != null) {
              Throwable x = ev.exception();
              String name = x instanceof EvalException ? ((EvalException) x).getExceptionClassName() : x.getClass().getName();
              if (x instanceof UnresolvedReferenceException) name = "UnresolvedReferenceException";
              StringWriter sw = new StringWriter();
              x.printStackTrace(new PrintWriter(sw));
              String tb = sw.toString();
              if (x instanceof EvalException) tb = name + ": " + String.valueOf(x.getMessage()) + "\n" + tb.substring(tb.indexOf('\n') + 1);
              boolean stopped = name.equals("jdk.jshell.spi.ExecutionControl$StoppedException") || x.getClass().getSimpleName().equals("StoppedException");
              if (stopped) send(id, "interrupt");
              else send(id, "error", hex(name.substring(name.lastIndexOf('.') + 1)), hex(String.valueOf(x.getMessage())), hex(tb));
              failed = true;
              break;
            }
            if (ev.status() == Snippet.Status.REJECTED) {
              StringBuilder msg = new StringBuilder();
              js.diagnostics(ev.snippet()).forEach(d -> msg.append(d.getMessage(Locale.ROOT)).append("\n"));
              String m = msg.toString().trim();
              send(id, "error", hex("CompilationException"), hex(m), hex(m + "\n" + ev.snippet().source() + "\n"));
              failed = true;
              break;
            }
            Snippet sn = ev.snippet();
            Snippet.SubKind k = sn.subKind();
            if (ev.value() != null && (k == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND || k == Snippet.SubKind.VAR_VALUE_SUBKIND || k == Snippet.SubKind.OTHER_EXPRESSION_SUBKIND)) {
              String type = sn instanceof VarSnippet ? ((VarSnippet) sn).typeName() : sn instanceof ExpressionSnippet ? ((ExpressionSnippet) sn).typeName() : "";
              value = type.equals("String") ? unquote(ev.value()) : ev.value();
            }
          }
        }
      } catch (Throwable t) {
        send(id, "error", hex(t.getClass().getSimpleName()), hex(String.valueOf(t.getMessage())), hex(String.valueOf(t)));
        failed = true;
      } finally {
        running = false;
      }
      if (!failed && value != null) send(id, "result", hex(value));
      for (Map.Entry<String, String> e : saved.entrySet()) {
        if (e.getValue() == null) System.clearProperty(e.getKey()); else System.setProperty(e.getKey(), e.getValue());
      }
      cell = null;
      send(id, "done");
    }
    System.exit(0);
  }
}
"""
