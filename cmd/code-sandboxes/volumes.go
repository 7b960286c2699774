package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// cliVolumeDir is where `volumes create` keeps named volumes:
// $CODE_SANDBOXES_VOLUME_DIR, else /var/lib/code-sandboxes/volumes (root)
// or ~/.local/share/code-sandboxes/volumes.
func cliVolumeDir() (string, error) {
	if d := os.Getenv("CODE_SANDBOXES_VOLUME_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/code-sandboxes/volumes", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the volumes (set CODE_SANDBOXES_VOLUME_DIR): %w", err)
	}
	return filepath.Join(home, ".local", "share", "code-sandboxes", "volumes"), nil
}

// volumeNameRE: a CLI volume's name is a directory name.
var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// parseVolumes reads --volume SOURCE:/path: SOURCE is a volume made with
// `volumes create` (by name) or an absolute host directory.
func parseVolumes(list []string) ([]sandboxes.VolumeMount, error) {
	var out []sandboxes.VolumeMount
	for _, s := range list {
		src, p, ok := strings.Cut(s, ":")
		if !ok || src == "" || p == "" {
			return nil, fmt.Errorf("--volume %q: use NAME:/path (a volume from `code-sandboxes volumes create`) or /host/dir:/path", s)
		}
		if !filepath.IsAbs(src) {
			if !volumeNameRE.MatchString(src) {
				return nil, fmt.Errorf("--volume %q: %q is neither a volume name nor an absolute host directory", s, src)
			}
			dir, err := cliVolumeDir()
			if err != nil {
				return nil, err
			}
			src = filepath.Join(dir, src)
			if _, err := os.Stat(src); err != nil {
				return nil, fmt.Errorf("--volume %q: no volume %q (code-sandboxes volumes create %s): %w", s, filepath.Base(src), filepath.Base(src), err)
			}
		}
		out = append(out, sandboxes.VolumeMount{Source: src, Path: p})
	}
	return out, nil
}

// volumesCmd manages the CLI's named volumes: host directories that
// sandboxes mount with --volume NAME:/path (local and docker). Their size
// is their host file system's: serve's E2B volumes, not these, are the
// size-bounded ones tenants get.
func volumesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "volumes", Short: "Create, list and remove named volumes that sandboxes mount with --volume NAME:/path"}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume (a directory every sandbox that mounts it may read and write)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !volumeNameRE.MatchString(args[0]) {
				return fmt.Errorf("volume name %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", args[0])
			}
			dir, err := cliVolumeDir()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o711); err != nil {
				return err
			}
			p := filepath.Join(dir, args[0])
			if err := os.Mkdir(p, 0o777); err != nil {
				if errors.Is(err, os.ErrExist) {
					return fmt.Errorf("volume %q exists; pick another name or remove it (code-sandboxes volumes rm %s)", args[0], args[0])
				}
				return err
			}
			// Each sandbox's user is a host uid of its own: the volume is
			// everyone's to write (umask aside), as serve's are.
			if err := os.Chmod(p, 0o777); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), p)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the volumes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := cliVolumeDir()
			if err != nil {
				return err
			}
			ents, err := os.ReadDir(dir)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			for _, e := range ents {
				if e.IsDir() && volumeNameRE.MatchString(e.Name()) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", e.Name(), filepath.Join(dir, e.Name()))
				}
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove volumes and their files",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := cliVolumeDir()
			if err != nil {
				return err
			}
			for _, n := range args {
				if !volumeNameRE.MatchString(n) {
					return fmt.Errorf("volume name %q is not one (see code-sandboxes volumes list)", n)
				}
				p := filepath.Join(dir, n)
				if _, err := os.Lstat(p); err != nil {
					return fmt.Errorf("volume %q: %w", n, err)
				}
				if err := os.RemoveAll(p); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(create, list, rm)
	return cmd
}
