package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

// envdPort is the port envd listens on inside a sandbox.
const envdPort = envdproto.Port

// envd reaches one sandbox's envd through the server's edge proxy, the
// way the SDKs do on a shared host: E2b-Sandbox-Id and E2b-Sandbox-Port
// headers on requests to the API's address.
type envd struct {
	hc    *http.Client
	base  string
	id    string
	token string
	proc  processconnect.ProcessClient
}

func newEnvd(hc *http.Client, apiURL string, sb *client.Sandbox) *envd {
	e := &envd{hc: hc, base: apiURL, id: sb.SandboxID, token: sb.EnvdAccessToken}
	e.proc = processconnect.NewProcessClient(hc, apiURL, connect.WithInterceptors(e))
	return e
}

// header sets the routing and authentication headers on h.
func (e *envd) header(h http.Header) {
	h.Set("E2b-Sandbox-Id", e.id)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(envdPort))
	if e.token != "" {
		h.Set("X-Access-Token", e.token)
	}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
}

// WrapUnary, WrapStreamingClient and WrapStreamingHandler make envd a
// connect interceptor that adds the headers.
func (e *envd) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		e.header(req.Header())
		return next(ctx, req)
	}
}

func (e *envd) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		e.header(conn.RequestHeader())
		return conn
	}
}

func (e *envd) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// run runs `bash -c cmd` and waits for its end event. A non-zero exit is
// an error.
func (e *envd) run(ctx context.Context, cmd string) error {
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", cmd}},
		Stdin:   proto.Bool(false),
	})
	stream, err := e.proc.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("sandbox %q: run %q: %w", e.id, cmd, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				return fmt.Errorf("sandbox %q: %q exited %d: %w", e.id, cmd, end.GetExitCode(), errdefs.ErrInvalid)
			}
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("sandbox %q: run %q: %w", e.id, cmd, err)
	}
	return fmt.Errorf("sandbox %q: run %q: stream ended without an end event: %w", e.id, cmd, errdefs.ErrUnavailable)
}

// files sends one /files request.
func (e *envd) files(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	u := e.base + "/files?" + url.Values{"path": {path}, "username": {"user"}}.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	e.header(req.Header)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %s %s: %w", e.id, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %s %s: %w", e.id, method, path, err)
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("sandbox %q: %s %s: %d %s: %w", e.id, method, path, resp.StatusCode, bytes.TrimSpace(data), errdefs.ErrUnavailable)
	}
	return data, nil
}
