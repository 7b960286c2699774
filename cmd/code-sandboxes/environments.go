// The environments command group: building, listing and removing
// environments.

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/environments"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
)

func environmentsCmd() *cobra.Command {
	var variant, dir, outForm string
	cmd := &cobra.Command{
		Use:   "environments",
		Short: "List built environments and the environments of each variant; build and remove them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return printEnvironments(cmd, variant, dir, outForm)
		},
	}
	cmd.Flags().StringVarP(&outForm, "output", "o", "table", "table (fits the terminal: $COLUMNS or 80), wide (every column whole) or json")
	cmd.Flags().StringVarP(&variant, "variant", "v", "", "only this variant")
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "environment store (default $CODE_SANDBOXES_ENV_DIR, /var/lib/code-sandboxes/environments as root, else ~/.local/share/code-sandboxes/environments)")

	var file, buildVariant string
	var force bool
	build := &cobra.Command{
		Use:   "build -f spec.yaml | build python",
		Short: "Build an environment from a spec file, or a built-in one (cached by build id)",
		Long: `Build an environment: a root filesystem from a YAML spec.

  name: geo                      # DNS label
  description: GIS tools
  base:
    debian: bookworm             # or image: registry/repo:tag, tarball: img.tar, host: true
    mirror: http://deb.example.org/debian   # default: this machine's apt mirror
  apt: [python3, python3-pip, python3-shapely]
  pip:
    lock: requirements.lock      # name==version --hash=sha256:… on every line
    index: https://pypi.example.org/simple
  files:
    - {path: /etc/geo.conf, content: "x=1\n", mode: "0644"}
  env: {GEO_HOME: /opt/geo}

The build id is the SHA-256 of the spec and every input it names; the name
points at the newest build, and sandboxes pin the id.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := environments.Options{Dir: dir, Progress: cmd.ErrOrStderr(), Force: force}
			if v := sandboxes.NormalizeVariant(buildVariant); v != "" && v != "local" {
				if file == "" {
					return fmt.Errorf("-v %s builds from a spec file: give -f spec.yaml", v)
				}
				// On the variant's own host (e2b: an E2B template in the
				// team of $E2B_API_KEY).
				opt.Config = &sandboxes.Config{Variant: v}
			}
			var b *environments.Build
			var err error
			switch {
			case file != "" && len(args) == 0:
				b, err = environments.BuildFile(cmd.Context(), file, opt)
			case file == "" && len(args) == 1:
				b, err = environments.BuildBuiltin(cmd.Context(), args[0], opt)
			default:
				return fmt.Errorf("give either a spec file (-f spec.yaml) or the name of a built-in environment (python)")
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", b.Name, b.ID)
			return nil
		},
	}
	build.Flags().StringVarP(&file, "file", "f", "", "spec file (YAML)")
	build.Flags().BoolVar(&force, "force", false, "rebuild even if this build id exists")
	build.Flags().StringVarP(&buildVariant, "variant", "v", "", "build on this variant's host instead of locally: e2b builds an E2B template in $E2B_API_KEY's team (prints name:tag, which pins the build, and E2B's build id)")
	rm := &cobra.Command{
		Use:   "rm NAME|BUILD-ID...",
		Short: "Remove built environments",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, ref := range args {
				b, err := environments.Remove(dir, ref)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s\n", b.Name, b.ID)
			}
			return nil
		},
	}
	var output, agentBin string
	var noAgent bool
	export := &cobra.Command{
		Use:   "export NAME|BUILD-ID -o image.tar",
		Short: "Write an environment as an image tarball (docker load, ctr images import, kind load)",
		Long: `Write a built environment as a ` + "`docker save`" + ` tarball tagged
code-sandboxes-env:<build id>, with the agent at ` + environment.AgentPath + ` (for the
kubernetes variant, whose pods can't bind-mount it). The agent is this program
unless --agent names another static build of code-sandboxes or
code-sandboxes-agent.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("give the output file with -o image.tar")
			}
			st, err := environment.Open(dir)
			if err != nil {
				return err
			}
			b, err := st.Resolve(args[0])
			if err != nil {
				return err
			}
			var extra []environment.ExtraFile
			if !noAgent {
				if agentBin == "" {
					if agentBin, err = os.Executable(); err != nil {
						return err
					}
				}
				extra = append(extra, environment.ExtraFile{Path: environment.AgentPath, HostPath: agentBin, Mode: 0o755})
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			tag := environment.ImageTag(b)
			if err := environment.WriteImageTar(cmd.Context(), b, tag, extra, f); err != nil {
				f.Close()
				os.Remove(output)
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", tag, output)
			return nil
		},
	}
	export.Flags().StringVarP(&output, "output", "o", "", "image tarball to write")
	export.Flags().StringVar(&agentBin, "agent", "", "static agent binary to include (default: this program)")
	export.Flags().BoolVar(&noAgent, "no-agent", false, "leave the agent out")
	cmd.AddCommand(build, rm, export)
	return cmd
}
