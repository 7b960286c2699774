package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// pauseCommands are pause, resume, snapshot and fork.
var pauseCommands = []func() *cobra.Command{pauseCmd, resumeCmd, snapshotCmd, forkCmd, snapshotsCmd}

// onSandbox is a command that acts on one existing sandbox.
func onSandbox(use, short string, nargs int, act func(ctx context.Context, cmd *cobra.Command, sb *sandboxes.Sandbox, args []string) error) *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(nargs),
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
			return act(cmd.Context(), cmd, sb, args[1:])
		},
	}
	c.flags(cmd, false)
	return cmd
}

func pauseCmd() *cobra.Command {
	return onSandbox("pause ID|NAME", "Checkpoint a sandbox's whole state to disk and stop it (local, isolation gvisor, network none)", 1,
		func(ctx context.Context, cmd *cobra.Command, sb *sandboxes.Sandbox, _ []string) error {
			if err := sb.Pause(ctx); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "paused %s\n", sb.ID())
			return nil
		})
}

func resumeCmd() *cobra.Command {
	return onSandbox("resume ID|NAME", "Bring a paused sandbox back, under the same id, with the same state", 1,
		func(ctx context.Context, cmd *cobra.Command, sb *sandboxes.Sandbox, _ []string) error {
			if err := sb.Resume(ctx); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resumed %s\n", sb.ID())
			return nil
		})
}

func snapshotCmd() *cobra.Command {
	cmd := onSandbox("snapshot ID|NAME SNAPSHOT", "Keep a sandbox's whole state as SNAPSHOT (fork starts sandboxes from it); the sandbox runs on", 2,
		func(ctx context.Context, cmd *cobra.Command, sb *sandboxes.Sandbox, args []string) error {
			if err := sb.Snapshot(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "snapshot %s of %s\n", args[0], sb.ID())
			return nil
		})
	var c common
	rm := &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots (sandboxes forked from them run on)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			for _, n := range args {
				if err := sandboxes.DeleteSnapshot(cmd.Context(), cfg, n); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", n)
			}
			return nil
		},
	}
	c.flags(rm, false)
	cmd.AddCommand(rm)
	return cmd
}

func snapshotsCmd() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List the snapshots kept (name, the sandbox it was taken of, when, size on disk)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			l, err := sandboxes.ListSnapshots(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFROM\tCREATED\tSIZE")
			for _, s := range l {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MB\n", s.Name, s.From, s.CreatedAt.Local().Format(time.DateTime), float64(s.Size)/1e6)
			}
			return tw.Flush()
		},
	}
	c.flags(cmd, false)
	return cmd
}

func forkCmd() *cobra.Command {
	var c common
	var name string
	cmd := &cobra.Command{
		Use:   "fork SNAPSHOT",
		Short: "Create a sandbox from a snapshot (its state, a new id and token) and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			cfg.Snapshot, cfg.Name = args[0], name
			sb, err := sandboxes.Create(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer sb.Detach()
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID())
			return nil
		},
	}
	c.flags(cmd, false)
	cmd.Flags().StringVar(&name, "name", "", "the new sandbox's name (generated when empty)")
	return cmd
}
