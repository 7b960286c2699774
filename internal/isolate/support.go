//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// CheckSupport reports, without starting anything, whether this kernel lets
// the current user create the sandbox's namespaces. The error names the
// setting to change.
func CheckSupport() error {
	if v, ok := readSysctl("user/max_user_namespaces"); ok && v == 0 {
		return errors.New("user namespaces are disabled: user.max_user_namespaces=0 (enable with `sysctl -w user.max_user_namespaces=15000`)")
	}
	if os.Geteuid() != 0 {
		// Debian/Ubuntu patch; absent on mainline kernels.
		if v, ok := readSysctl("kernel/unprivileged_userns_clone"); ok && v == 0 {
			return errors.New("unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone=0 (enable with `sysctl -w kernel.unprivileged_userns_clone=1`, or run as root)")
		}
		// Ubuntu 23.10+: unconfined processes get a user namespace without
		// capabilities, so mounting fails later.
		if v, ok := readSysctl("kernel/apparmor_restrict_unprivileged_userns"); ok && v == 1 && apparmorUnconfined() {
			return errors.New("AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns=1 (set it to 0 with sysctl, add an AppArmor profile allowing `userns` for this binary, or run as root)")
		}
	}
	if _, err := os.Stat("/proc/self/ns/cgroup"); err != nil {
		return fmt.Errorf("kernel without cgroup namespaces (need Linux >= 4.6): %w", err)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err == nil && !strings.Contains(string(b), "\nSeccomp:") {
		return errors.New("kernel without seccomp support (CONFIG_SECCOMP_FILTER)")
	}
	return nil
}

func readSysctl(name string) (int, bool) {
	v, ok := readInt("/proc/sys/" + name)
	return int(v), ok
}

func apparmorUnconfined() bool {
	b, err := os.ReadFile("/proc/self/attr/current")
	if err != nil {
		return true
	}
	s := strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
	return s == "" || s == "unconfined"
}
