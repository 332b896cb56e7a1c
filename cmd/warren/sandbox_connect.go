package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	pb "github.com/warren-sandbox/warren/api/envd/process"
)

// sandboxConnectCommand is `warren sandbox connect ID`: an interactive
// shell in the sandbox on a PTY, as `e2b sandbox connect` opens (bash -i
// -l, TERM passed on); the local terminal is put in raw mode while it
// runs and resizes follow the window. Without a terminal on stdin, stdin
// is sent as typed input.
func sandboxConnectCommand(stdout io.Writer) *cobra.Command {
	var api apiFlags
	var user string
	cmd := &cobra.Command{
		Use:   "connect SANDBOX_ID",
		Short: "Open a terminal session in a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			e, err := api.envd(ctx, args[0])
			if err != nil {
				return err
			}
			in := os.Stdin
			cols, rows, isTerm := termSize(in)
			if !isTerm {
				cols, rows = 80, 24
			}
			termName := os.Getenv("TERM")
			if termName == "" || !isTerm {
				termName = "xterm-256color"
			}
			cfg := &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"},
				Envs: map[string]string{"TERM": termName, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}}
			st, err := e.proc.Start(ctx, e.request(&pb.StartRequest{Process: cfg, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: cols, Rows: rows}}}, user))
			if err != nil {
				return err
			}
			if !st.Receive() {
				return st.Err()
			}
			pid := st.Msg().GetEvent().GetStart().GetPid()
			if isTerm {
				restore, err := makeRaw(in)
				if err == nil {
					defer restore()
				}
			}
			sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
			go func() { // keystrokes
				buf := make([]byte, 4096)
				for {
					n, err := in.Read(buf)
					if n > 0 {
						msg := &pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: append([]byte(nil), buf[:n]...)}}}
						if _, err := e.proc.SendInput(ctx, request(e, msg, user)); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			if isTerm { // window size
				winch := make(chan os.Signal, 1)
				signal.Notify(winch, syscall.SIGWINCH)
				defer signal.Stop(winch)
				go func() {
					for range winch {
						if c, r, ok := termSize(in); ok {
							msg := &pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: c, Rows: r}}}
							_, _ = e.proc.Update(ctx, request(e, msg, user))
						}
					}
				}()
			}
			return exitOf(drain(st, stdout, stdout))
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&user, "user", "", "user of the shell (default: the sandbox's default user)")
	return cmd
}
