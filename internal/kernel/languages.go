package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrLanguageUnavailable: the language has no kernel here, or its
// interpreter is not installed; the message says which and what to do.
var ErrLanguageUnavailable = errors.New("kernel: language unavailable")

// Languages our kernel runs. Python cells run in the Python kernel itself; the others
// in a persistent interpreter the kernel drives (state between runs, live
// output, errors, interrupt by SIGINT).
var interpreters = map[string]string{"python": "", "bash": "bash", "javascript": "node", "typescript": "node", "r": "Rscript", "java": "java"}

var nodeVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^v(\d+)\.(\d+)`) })

// CheckLanguage reports whether a context of language can start here: its
// interpreter is in the PATH of env (nil = the process's) and, for
// TypeScript, node can strip types (22.6 or later). The error wraps
// ErrLanguageUnavailable and says what is missing.
func CheckLanguage(ctx context.Context, language string, env []string) error {
	prog, ok := interpreters[language]
	if !ok {
		return fmt.Errorf("%w: %q has no kernel in this sandbox (python, javascript, typescript, bash, r and java do)", ErrLanguageUnavailable, language)
	}
	if prog == "" {
		return nil
	}
	path, err := lookPathEnv(prog, env)
	if err != nil {
		return fmt.Errorf("%w: %s needs %s, which is not installed in this sandbox (%v)", ErrLanguageUnavailable, language, prog, err)
	}
	if language == "java" {
		// The kernel runs on JShell's API (module jdk.jshell), which a JDK
		// has and a JRE lacks; jshell stands for it.
		if _, err := lookPathEnv("jshell", env); err != nil {
			return fmt.Errorf("%w: java needs a JDK (JShell), and this sandbox has only a JRE (%v)", ErrLanguageUnavailable, err)
		}
		return nil
	}
	if language != "typescript" {
		return nil
	}
	if TypeScriptLib() != "" {
		return nil // transpiled by TypeScript itself, on any node
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Errorf("%w: typescript: %s --version: %v", ErrLanguageUnavailable, path, err)
	}
	v := strings.TrimSpace(string(out))
	m := nodeVersion().FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("%w: typescript: unrecognised node version %q", ErrLanguageUnavailable, v)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 22 || major == 22 && minor < 6 {
		return fmt.Errorf("%w: typescript needs the typescript package (Debian's node-typescript, or npm's in /usr/lib/node_modules) or node 22.6 or later (which strips types itself); this sandbox has node %s and neither", ErrLanguageUnavailable, v)
	}
	return nil
}

// typeScriptLibs are where the typescript package may be installed, in
// the order the kernel's _TS_LIBS (py/languages.py) tries them.
var typeScriptLibs = []string{"/usr/share/nodejs/typescript", "/usr/lib/node_modules/typescript", "/usr/local/lib/node_modules/typescript"}

// TypeScriptLib is the directory of the typescript package the kernel
// transpiles TypeScript cells with; "" when there is none (node's type
// stripping is then the way, from node 22.6).
func TypeScriptLib() string {
	for _, d := range typeScriptLibs {
		if fi, err := os.Stat(d + "/lib/typescript.js"); err == nil && fi.Mode().IsRegular() {
			return d
		}
	}
	return ""
}

func lookPathEnv(prog string, env []string) (string, error) {
	pathVar := ""
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar, found = v, true
		}
	}
	if env == nil || !found {
		return exec.LookPath(prog)
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			continue
		}
		if p, err := exec.LookPath(dir + "/" + prog); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in PATH %s", prog, pathVar)
}
