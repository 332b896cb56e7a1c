package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// HTTPEnvd talks to envd over HTTP: /health, /init, and the Connect process
// service for the template's start command.
type HTTPEnvd struct {
	client *http.Client
}

var _ Envd = (*HTTPEnvd)(nil)

// NewHTTPEnvd returns an Envd over c (nil: a client without keep-alives
// across sandboxes, since every sandbox has its own address). The client
// never follows redirects: envd runs inside a tenant's sandbox, and a
// redirect would make the node request any URL the tenant names.
func NewHTTPEnvd(c *http.Client) *HTTPEnvd {
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	cc := *c
	cc.CheckRedirect = noRedirects
	return &HTTPEnvd{client: &cc}
}

// noRedirects is http.Client.CheckRedirect refusing every redirect.
func noRedirects(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("envd redirected the node to %s: refused", req.URL.Redacted())
}

// WaitHealthy implements Envd: it polls GET /health until it answers 204.
func (e *HTTPEnvd) WaitHealthy(ctx context.Context, addr string) error {
	delay := 5 * time.Millisecond
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/health", nil)
		if err != nil {
			cancel()
			return fmt.Errorf("envd health: %w", err)
		}
		resp, err := e.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				cancel()
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		cancel()
		last = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("envd health: %w (last: %v)", ctx.Err(), last)
		case <-t.C:
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// Init implements Envd.
func (e *HTTPEnvd) Init(ctx context.Context, addr, initToken string, body EnvdInit) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/init", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("envd init: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Warren-Init-Token", initToken)
	if body.AccessToken != "" {
		req.Header.Set("X-Access-Token", body.AccessToken)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("envd init: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("envd init: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Start implements Envd: it calls envd's process.Process/Start, reads the
// stream up to the start event and closes it, leaving the process running.
func (e *HTTPEnvd) Start(ctx context.Context, addr, accessToken string, p EnvdProcess) error {
	_, err := e.start(ctx, addr, accessToken, p, false)
	return err
}

// Run implements Envd: it starts the process and reads its stream to the
// end event.
func (e *HTTPEnvd) Run(ctx context.Context, addr, accessToken string, p EnvdProcess) (int, error) {
	return e.start(ctx, addr, accessToken, p, true)
}

func (e *HTTPEnvd) start(ctx context.Context, addr, accessToken string, p EnvdProcess, wait bool) (int, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // closes the stream; a started process keeps running in envd
	c := processconnect.NewProcessClient(e.client, "http://"+addr)
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: p.Cmd, Args: p.Args, Envs: p.Envs, Cwd: opt(p.Cwd)},
		Tag:     opt(p.Tag),
		Stdin:   proto.Bool(false),
	})
	if p.User != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User+":")))
	}
	if accessToken != "" {
		req.Header().Set("X-Access-Token", accessToken)
	}
	stream, err := c.Start(sctx, req)
	if err != nil {
		return -1, fmt.Errorf("envd start %q: %w", p.Tag, err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetStart() != nil && !wait {
			return 0, nil
		}
		if end := ev.GetEnd(); end != nil {
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, fmt.Errorf("envd start %q: %w", p.Tag, err)
	}
	return -1, fmt.Errorf("envd start %q: stream ended early", p.Tag)
}

func opt(t string) *string {
	if t == "" {
		return nil
	}
	return proto.String(t)
}
