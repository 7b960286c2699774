package kernel

import (
	"os"
	"path/filepath"
)

// BenchLanguage is one language's benchmark workload, shared by this
// package's BenchmarkLanguage*/BenchmarkPeer and bench's languages section
// (make bench): Setup then Cell on our kernel, and the same program run
// one-shot by the language's own interpreter (its peer).
type BenchLanguage struct {
	Lang, Setup, Cell string
	Peer              string // the peer's program: node, bash, Rscript, jshell
}

// BenchLanguages: TypeScript's peer is node -e on the same (type-free)
// code; Java's is jshell on a script file.
var BenchLanguages = []BenchLanguage{
	{"javascript", "let x = 40", "x + 2", "node"},
	{"typescript", "let x: number = 40", "x + 2", "node"},
	{"bash", "x=40", "echo $((x + 2))", "bash"},
	{"r", "x <- 40", "x + 2", "Rscript"},
	{"java", "int x = 40;", "x + 2", "jshell"},
}

// PeerArgs returns the peer's arguments (after l.Peer) that run Setup and
// print Cell's value in one process; dir receives a script file where the
// peer needs one (jshell).
func (l BenchLanguage) PeerArgs(dir string) ([]string, error) {
	switch l.Lang {
	case "javascript", "typescript":
		return []string{"-e", "let x = 40; console.log(x + 2)"}, nil
	case "java":
		f := filepath.Join(dir, "peer.jsh")
		if err := os.WriteFile(f, []byte(l.Setup+"\nSystem.out.println(x + 2);\n/exit\n"), 0o644); err != nil {
			return nil, err
		}
		return []string{"-q", f}, nil
	case "r":
		return []string{"-e", l.Setup + "; " + l.Cell}, nil // Rscript prints a top-level value
	default: // bash
		return []string{"-c", l.Setup + "; " + l.Cell}, nil
	}
}
