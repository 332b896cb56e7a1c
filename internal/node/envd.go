package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// HTTPEnvd talks to envd over HTTP: /health, /init, and the Connect process
// service (JSON codec) for the template's start command.
type HTTPEnvd struct {
	client *http.Client
}

var _ Envd = (*HTTPEnvd)(nil)

// NewHTTPEnvd returns an Envd over c (nil: a client without keep-alives
// across sandboxes, since every sandbox has its own address).
func NewHTTPEnvd(c *http.Client) *HTTPEnvd {
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	return &HTTPEnvd{client: c}
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

// Start implements Envd: it calls process.Process/Start (Connect protocol,
// JSON codec), reads the stream up to the start event and leaves the
// process running.
func (e *HTTPEnvd) Start(ctx context.Context, addr, accessToken string, p EnvdProcess) error {
	type config struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args,omitempty"`
		Envs map[string]string `json:"envs,omitempty"`
		Cwd  string            `json:"cwd,omitempty"`
	}
	msg, err := json.Marshal(struct {
		Process config `json:"process"`
		Tag     string `json:"tag,omitempty"`
		Stdin   bool   `json:"stdin"`
	}{Process: config{Cmd: p.Cmd, Args: p.Args, Envs: p.Envs, Cwd: p.Cwd}, Tag: p.Tag})
	if err != nil {
		return fmt.Errorf("envd start %q: %w", p.Tag, err)
	}
	var body bytes.Buffer
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(msg)))
	body.Write(hdr[:])
	body.Write(msg)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // closes the stream; the process keeps running in envd
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, "http://"+addr+"/process.Process/Start", &body)
	if err != nil {
		return fmt.Errorf("envd start %q: %w", p.Tag, err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if p.User != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User+":")))
	}
	if accessToken != "" {
		req.Header.Set("X-Access-Token", accessToken)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("envd start %q: %w: %w", p.Tag, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("envd start %q: %s: %s", p.Tag, resp.Status, bytes.TrimSpace(msg))
	}
	r := bufio.NewReader(resp.Body)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("envd start %q: stream ended before the process started: %w", p.Tag, err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > 1<<20 {
			return fmt.Errorf("envd start %q: stream message of %d bytes", p.Tag, n)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return fmt.Errorf("envd start %q: %w", p.Tag, err)
		}
		if hdr[0]&0x02 != 0 { // end of stream
			var end struct {
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(data, &end)
			if end.Error != nil {
				return fmt.Errorf("envd start %q: %s: %s", p.Tag, end.Error.Code, end.Error.Message)
			}
			return fmt.Errorf("envd start %q: stream ended before the process started", p.Tag)
		}
		var ev struct {
			Event struct {
				Start *struct {
					Pid uint32 `json:"pid"`
				} `json:"start"`
			} `json:"event"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("envd start %q: %w", p.Tag, err)
		}
		if ev.Event.Start != nil {
			return nil
		}
	}
}
