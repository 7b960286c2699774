//go:build linux

// Package seccompasm assembles the local sandboxes' seccomp filter (its
// rules are isolate's, seccomp.go) with go-seccomp-bpf. isolate ships the
// filter pre-assembled for amd64 (zseccomp_amd64.go, which a test checks
// against this package's output) and assembles it at run time on other
// architectures: the library's syscall tables for five architectures cost
// every process that links it ~0.12 ms and 165 KB of heap at start, and
// each process of a sandbox runs the binary that links isolate.
package seccompasm

import (
	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Rules are what the filter refuses.
type Rules struct {
	Denied []string // EPERM
	ENOSYS []string // ENOSYS: callers probe these and fall back
	// NSCloneFlags: clone with any of these flags gets EPERM.
	NSCloneFlags uint64
	// Personas: personality with any other value gets EPERM.
	Personas []uint64
	// Args are checks on arguments, before everything else but the
	// architecture check.
	Args []bpf.Instruction
}

// Assemble returns the filter for the running architecture: first a kill
// of any other architecture's syscalls (the library's own check lets a
// foreign arch fall through to the default action, allow, which would
// let i386 syscalls bypass the denylist), then r.Args, then the lists.
func Assemble(r Rules) ([]unix.SockFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	var conditional []seccomp.NameWithConditions
	if _, ok := info.SyscallNames["clone"]; ok {
		// clone's flags are argument 0 on x86-64 and arm64.
		conditional = append(conditional, seccomp.NameWithConditions{Name: "clone",
			Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: r.NSCloneFlags}}})
	}
	var persona []seccomp.Condition
	for _, v := range r.Personas {
		persona = append(persona, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v})
	}
	conditional = append(conditional, seccomp.NameWithConditions{Name: "personality", Conditions: persona})
	p := &seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: known(r.Denied), NamesWithCondtions: conditional},
			// The library returns EPERM for plain ActionErrno; any other
			// errno is encoded into the action's data bits.
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: known(r.ENOSYS)},
		},
	}
	insts, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}
	prog = append(prog, r.Args...)
	prog = append(prog, insts...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return filter, nil
}
