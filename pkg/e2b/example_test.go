package e2b_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/pkg/e2b"
)

// Create a sandbox from the environment's configuration (E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN), run a command, and kill it.
func Example() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	r, err := sb.Commands.Run(ctx, `python -c "print(6*7)"`, e2b.RunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(r.Stdout) // 42
}

// Configure from options instead of the environment.
func ExampleConfig() {
	cfg := e2b.Config{
		APIKey:         "e2b_...",
		APIURL:         "http://127.0.0.1:3000",
		SandboxURL:     "http://127.0.0.1:3000", // warren serve's plain-http mode
		RequestTimeout: 30 * time.Second,
	}
	sb, err := e2b.Create(context.Background(), e2b.CreateOptions{Config: cfg, Metadata: map[string]string{"job": "42"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sb.ID)
}

// Pause a sandbox and pick it up again later, possibly from another process.
func ExampleSandbox_Pause() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Pause(ctx); err != nil {
		log.Fatal(err)
	}
	again, err := e2b.Connect(ctx, sb.ID, e2b.ConnectOptions{Timeout: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.ID == sb.ID)
}

// Page through the running sandboxes of the last hour that carry a
// metadata pair.
func ExampleList() {
	ctx := context.Background()
	token := ""
	for {
		page, next, err := e2b.List(ctx, e2b.ListOptions{Metadata: map[string]string{"job": "42"}, State: []string{"running"},
			StartedAfter: time.Now().Add(-time.Hour), NextToken: token})
		if err != nil {
			log.Fatal(err)
		}
		for _, s := range page {
			fmt.Println(s.SandboxID, s.StartedAt)
		}
		if token = next; token == "" {
			break
		}
	}
}

// Stream a command's output while it runs, and tell a failed command by
// its *CommandExitError.
func ExampleCommands_Run() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	_, err = sb.Commands.Run(ctx, "make test", e2b.RunOptions{
		Cwd:      "/home/user/project",
		Env:      map[string]string{"CI": "true"},
		Stdout:   os.Stdout,
		OnStderr: func(s string) { log.Print(s) },
		Timeout:  10 * time.Minute,
	})
	var exit *e2b.CommandExitError
	if errors.As(err, &exit) {
		fmt.Println("tests failed with code", exit.ExitCode)
	} else if err != nil {
		log.Fatal(err)
	}
}

// Run a server in the background, talk to its stdin, then stop it.
func ExampleCommands_Start() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	h, err := sb.Commands.Start(ctx, "python3 -i", e2b.RunOptions{Stdin: true, Timeout: -1, Stdout: os.Stdout})
	if err != nil {
		log.Fatal(err)
	}
	if err := h.SendStdin(ctx, []byte("print(6*7)\n")); err != nil {
		log.Fatal(err)
	}
	if err := h.CloseStdin(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := h.Wait(ctx); err != nil {
		log.Fatal(err)
	}
}

// Write, read, list and remove files.
func ExampleFiles() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	if _, err := sb.Files.Write(ctx, "/home/user/a.txt", []byte("hello"), e2b.FileOptions{}); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Files.WriteStream(ctx, "big.log", strings.NewReader("streamed\n"), e2b.FileOptions{}); err != nil {
		log.Fatal(err)
	}
	data, err := sb.Files.Read(ctx, "/home/user/a.txt", e2b.FileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	entries, err := sb.Files.List(ctx, "/home/user", e2b.ListDirOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.Type, e.Size)
	}
	if _, err := sb.Files.Stat(ctx, "missing", e2b.FileOptions{}); errors.Is(err, e2b.ErrNotFound) {
		fmt.Println(string(data), "and no missing file")
	}
	if err := sb.Files.Remove(ctx, "big.log", e2b.FileOptions{}); err != nil {
		log.Fatal(err)
	}
}

// Watch a directory; events arrive on a channel until Stop.
func ExampleFiles_Watch() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	w, err := sb.Files.Watch(ctx, "/home/user", e2b.WatchOptions{Recursive: true})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	if _, err := sb.Commands.Run(ctx, "touch /home/user/new", e2b.RunOptions{}); err != nil {
		log.Fatal(err)
	}
	ev := <-w.Events
	fmt.Println(ev.Type, ev.Name) // create new
}

// Collect a directory's changes in envd and ask for them when convenient,
// each with the changed entry's details.
func ExampleFiles_WatchPolling() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	w, err := sb.Files.WatchPolling(ctx, "/home/user", e2b.WatchOptions{IncludeEntry: true})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())
	if _, err := sb.Commands.Run(ctx, "echo hi > /home/user/new", e2b.RunOptions{}); err != nil {
		log.Fatal(err)
	}
	events, err := w.NewEvents(ctx) // what happened since the watch started
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range events {
		if ev.Entry != nil {
			fmt.Println(ev.Type, ev.Name, ev.Entry.Size)
		}
	}
}

// Move a large file gzip'd both ways; a body cut short is an error, never
// a short file.
func ExampleFileOptions_gzip() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	in, err := os.Open("dump.sql")
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	if _, err := sb.Files.WriteStream(ctx, "/home/user/dump.sql", in, e2b.FileOptions{Gzip: true}); err != nil {
		log.Fatal(err)
	}
	data, err := sb.Files.Read(ctx, "/home/user/dump.sql", e2b.FileOptions{Gzip: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(data))
}

// Drive an interactive shell on a terminal.
func ExamplePty() {
	ctx := context.Background()
	sb, err := e2b.Create(ctx, e2b.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
	term, err := sb.Pty.Create(ctx, e2b.PtyOptions{Cols: 80, Rows: 24, Output: os.Stdout})
	if err != nil {
		log.Fatal(err)
	}
	if err := sb.Pty.Resize(ctx, term.PID, 120, 40); err != nil {
		log.Fatal(err)
	}
	if err := sb.Pty.SendInput(ctx, term.PID, []byte("ls -la\nexit\n")); err != nil {
		log.Fatal(err)
	}
	if _, err := term.Wait(ctx); err != nil {
		log.Fatal(err)
	}
}

// Build a template from the base one, printing the build log as it goes,
// and start a sandbox of it.
func ExampleBuildTemplate() {
	ctx := context.Background()
	_, err := e2b.BuildTemplate(ctx, e2b.TemplateOptions{
		Name:         "myapp:v1",
		FromTemplate: "base",
		// The COPY step's files are read from ContextDir and uploaded.
		ContextDir: "./myapp",
		Steps: []e2b.TemplateStep{e2b.StepRun("pip install requests", "root"),
			e2b.StepCopy("src", "/home/user/app", "user"), e2b.StepWorkdir("/home/user/app")},
		OnLog: func(e e2b.BuildLogEntry) { fmt.Println(e.Step, e.Message) },
	})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := e2b.Create(ctx, e2b.CreateOptions{Template: "myapp:v1"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
}
