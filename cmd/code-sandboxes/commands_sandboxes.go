// Sandbox lifecycle commands: create, list, get, sweep and delete.

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func createCmd() *cobra.Command {
	var c common
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox that keeps running (until its lifetime ends or it is deleted) and print its id",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			// A sandbox made with create is meant to stay until its lifetime
			// ends or it is deleted, however long it sits unused.
			if cfg.IdleTimeout == 0 {
				cfg.IdleTimeout = sandboxes.NoIdleTimeout
			}
			sb, err := sandboxes.Create(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if lang != "" {
				// Start the language's kernel now: a sandbox that can't run
				// it is refused (and ended) here, not at the first exec.
				ex, err := sb.RunCode(cmd.Context(), "", sandboxes.WithLanguage(lang))
				if err == nil && ex.Error != nil {
					err = fmt.Errorf("%s: %s", ex.Error.Name, ex.Error.Value)
				}
				if err != nil {
					_ = sb.Close()
					return fmt.Errorf("--language %s: %w (the sandbox was removed)", lang, err)
				}
			}
			defer sb.Detach()
			if jsonOut {
				info, err := sb.Info(cmd.Context())
				if err != nil {
					return err
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID())
			return nil
		},
	}
	c.flags(cmd, true)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("language").Usage = "start this language's kernel (" + strings.Join(languages, ", ") + ") in the new sandbox, refusing a sandbox that can't run it; exec --sandbox then runs it with --language"
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the sandbox's info as JSON")
	return cmd
}

func printTable(cmd *cobra.Command, infos []sandboxes.Info) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tVARIANT\tNAME\tSTATUS\tENDS\tTAGS")
	for _, i := range infos {
		keys := make([]string, 0, len(i.Tags))
		for k := range i.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tags := make([]string, 0, len(keys))
		for _, k := range keys {
			tags = append(tags, k+"="+i.Tags[k])
		}
		ends := "-"
		if !i.EndAt.IsZero() {
			ends = time.Until(i.EndAt).Round(time.Second).String()
		}
		name := i.Name
		if name == "" {
			name = "-" // a sandbox another tool made (list --all)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Variant, name, i.Status, ends, strings.Join(tags, ","))
	}
	tw.Flush()
}

// e2bListAll is the e2b variant's options that list every sandbox of the
// team (e2boptions.go); nil in a localonly build, which has no e2b.
var e2bListAll func() any

func listCmd() *cobra.Command {
	var c common
	var jsonOut, all bool
	var name string
	var tags []string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List running sandboxes",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			t, err := parseKV(tags, "tag")
			if err != nil {
				return err
			}
			if all {
				// Only E2B has sandboxes another tool made in the same
				// account; elsewhere every sandbox listed is already ours.
				if sandboxes.NormalizeVariant(c.variant) != "e2b" || e2bListAll == nil {
					return fmt.Errorf("--all applies to -v e2b (every sandbox of the E2B team, whoever made it); -v %s lists every sandbox code-sandboxes made there already", c.variant)
				}
				cfg.Options = e2bListAll()
			}
			infos, err := sandboxes.List(cmd.Context(), cfg, sandboxes.ListOptions{Name: name, Tags: t})
			if err != nil {
				return err
			}
			if jsonOut {
				if infos == nil {
					infos = []sandboxes.Info{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(infos)
			}
			printTable(cmd, infos)
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	cmd.Flags().StringVar(&name, "name", "", "only sandboxes with this name")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "only sandboxes with this tag key=value (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, "with -v e2b: also the team's sandboxes that other tools (E2B's SDKs, the dashboard) made; their metadata shows as tags")
	return cmd
}

func getCmd() *cobra.Command {
	var c common
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "get ID|NAME",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			sb, err := sandboxes.Get(cmd.Context(), cfg, args[0])
			if err != nil {
				return err
			}
			defer sb.Detach()
			info, err := sb.Info(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			printTable(cmd, []sandboxes.Info{info})
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func sweepCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Remove what dead sandboxes left behind (list never cleans up; create and delete sweep as they go)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			n, err := sandboxes.Sweep(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d dead sandboxes\n", n)
			return nil
		},
	}
	c.flags(cmd, false)
	return cmd
}

func deleteCmd() *cobra.Command {
	var c common
	var yes bool
	var tags []string
	cmd := &cobra.Command{
		Use:   "delete [ID|NAME]",
		Short: "Kill sandboxes by id, name or tags",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			t, err := parseKV(tags, "tag")
			if err != nil {
				return err
			}
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			if target == "" && len(t) == 0 {
				return fmt.Errorf("name a sandbox (id or name) or give --tag key=value")
			}
			if !yes {
				what := target
				if what == "" {
					what = "every sandbox tagged " + strings.Join(tags, ",")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Delete %s? [y/N] ", what)
				ans, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(ans)); a != "y" && a != "yes" {
					fmt.Fprintln(cmd.OutOrStdout(), "Nothing deleted.")
					return exitError{1}
				}
			}
			killed, err := sandboxes.Kill(cmd.Context(), cfg, target, sandboxes.ListOptions{Tags: t})
			for _, id := range killed {
				fmt.Fprintln(cmd.OutOrStdout(), "deleted", id)
			}
			if err != nil {
				return err
			}
			if len(killed) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no sandbox matched")
				return exitError{1}
			}
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "kill every sandbox with this tag key=value (repeatable)")
	return cmd
}
