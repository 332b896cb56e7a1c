package nodereg

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/store"
)

// Credentials is the control plane's side of node identity
// (internal/nodeauth): it issues and revokes node tokens, tells which node
// a call comes from, and gives the credentials of its own calls to a
// node. Without a credential key it is insecure: nodes register without a
// token, from loopback only (`warren api --insecure-loopback-nodes`, for
// one-host tests), and its calls to them carry none.
type Credentials struct {
	issuer *nodeauth.Issuer // nil: insecure
	tokens store.NodeTokens
	log    *slog.Logger
	// CacheTTL bounds how long the token a node authenticates with is
	// remembered for the calls to it (default 5 s): a rotation reaches
	// every replica's calls that soon.
	CacheTTL time.Duration

	mu      sync.Mutex
	current map[string]cachedToken // node ID → its token
	touched map[string]time.Time   // token ID → last recorded use
}

type cachedToken struct {
	token string
	at    time.Time
}

// NewCredentials returns the credentials over tokens with the control
// plane's key; an empty key is the insecure mode.
func NewCredentials(tokens store.NodeTokens, key string, log *slog.Logger) (*Credentials, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Credentials{tokens: tokens, log: log, current: map[string]cachedToken{}, touched: map[string]time.Time{}, CacheTTL: 5 * time.Second}
	if key != "" {
		iss, err := nodeauth.NewIssuer(key)
		if err != nil {
			return nil, err
		}
		c.issuer = iss
	}
	return c, nil
}

// Insecure reports whether nodes register without a token.
func (c *Credentials) Insecure() bool { return c.issuer == nil }

// Issue makes a new token for node nodeID and returns it (shown once:
// only its record is kept) with its record.
func (c *Credentials) Issue(ctx context.Context, nodeID, name string) (string, *store.NodeToken, error) {
	if c.issuer == nil {
		return "", nil, errdefs.Publicf(errdefs.ErrUnsupported, "node tokens: warren api has no --node-credential-key")
	}
	if err := ValidID(nodeID); err != nil {
		return "", nil, err
	}
	if len(name) > 200 {
		return "", nil, errdefs.Publicf(errdefs.ErrInvalid, "node token name: at most 200 characters")
	}
	rec := &store.NodeToken{ID: nodeauth.NewTokenID(), NodeID: nodeID, Name: name}
	if err := c.tokens.CreateNodeToken(ctx, rec); err != nil {
		return "", nil, err
	}
	c.log.Info("node token issued", "node_id", nodeID, "token_id", rec.ID)
	return c.issuer.Token(rec.ID, nodeID), rec, nil
}

// Revoke revokes token id of node nodeID: calls with it are refused from
// now on, and the control plane's calls to the node stop using it within
// CacheTTL.
func (c *Credentials) Revoke(ctx context.Context, nodeID, id string) (*store.NodeToken, error) {
	rec, err := c.tokens.GetNodeToken(ctx, id)
	if err == nil && rec.NodeID != nodeID {
		err = errdefs.Publicf(errdefs.ErrNotFound, "node token %q of node %q not found", id, nodeID)
	}
	if err != nil {
		return nil, err
	}
	if rec, err = c.tokens.RevokeNodeToken(ctx, id); err != nil {
		return nil, err
	}
	c.mu.Lock()
	delete(c.current, nodeID)
	c.mu.Unlock()
	c.log.Warn("node token revoked", "node_id", nodeID, "token_id", id)
	return rec, nil
}

// Tokens lists node nodeID's token records.
func (c *Credentials) Tokens(ctx context.Context, nodeID string) ([]*store.NodeToken, error) {
	return c.tokens.ListNodeTokens(ctx, nodeID)
}

// Authenticate returns the node whose token r carries as its bearer, or
// ErrUnauthorized. In the insecure mode a request from loopback is any
// node's (""), one from elsewhere none.
func (c *Credentials) Authenticate(r *http.Request) (string, error) {
	if c.issuer == nil {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil || !nodeauth.Loopback(host) {
			return "", fmt.Errorf("node from %s: nodes register from loopback only without node tokens: %w", r.RemoteAddr, errdefs.ErrUnauthorized)
		}
		return "", nil
	}
	tok := nodeauth.Bearer(r.Header)
	id, ok := nodeauth.TokenID(tok)
	if !ok {
		return "", fmt.Errorf("no node token: %w", errdefs.ErrUnauthorized)
	}
	rec, err := c.tokens.GetNodeToken(r.Context(), id)
	switch {
	case errdefs.IsNotFound(err):
		return "", fmt.Errorf("node token %s: unknown: %w", id, errdefs.ErrUnauthorized)
	case err != nil:
		return "", err
	case !c.issuer.Check(tok, rec.ID, rec.NodeID):
		return "", fmt.Errorf("node token %s: not the one issued: %w", id, errdefs.ErrUnauthorized)
	case rec.Revoked():
		return "", fmt.Errorf("node token %s of node %q: revoked: %w", id, rec.NodeID, errdefs.ErrUnauthorized)
	}
	c.touch(r.Context(), rec)
	return rec.NodeID, nil
}

// touchEvery is how often a token's use is recorded.
const touchEvery = 15 * time.Second

func (c *Credentials) touch(ctx context.Context, rec *store.NodeToken) {
	now := time.Now()
	c.mu.Lock()
	last, seen := c.touched[rec.ID]
	if seen && now.Sub(last) < touchEvery {
		c.mu.Unlock()
		return
	}
	c.touched[rec.ID] = now
	if cur, ok := c.current[rec.NodeID]; ok && cur.token != c.issuer.Token(rec.ID, rec.NodeID) {
		delete(c.current, rec.NodeID) // rotated: the calls to it take the new one
	}
	c.mu.Unlock()
	if err := c.tokens.TouchNodeToken(context.WithoutCancel(ctx), rec.ID, now); err != nil {
		c.log.Warn("node token use not recorded", "token_id", rec.ID, "error", err)
	}
}

// Token returns the token node nodeID authenticates with (the good one it
// used last; before it used any, the newest), from which the credentials
// of the control plane's calls to it derive; "" in the insecure mode.
// A node without a good token is ErrUnavailable: nothing is sent to it.
func (c *Credentials) Token(ctx context.Context, nodeID string) (string, error) {
	if c.issuer == nil {
		return "", nil
	}
	c.mu.Lock()
	cur, ok := c.current[nodeID]
	c.mu.Unlock()
	if ok && time.Since(cur.at) < c.CacheTTL {
		return cur.token, nil
	}
	recs, err := c.tokens.ListNodeTokens(ctx, nodeID)
	if err != nil {
		return "", err
	}
	good := recs[:0]
	for _, r := range recs {
		if !r.Revoked() {
			good = append(good, r)
		}
	}
	if len(good) == 0 {
		return "", fmt.Errorf("node %q has no good node token: %w", nodeID, errdefs.ErrUnavailable)
	}
	sort.SliceStable(good, func(i, j int) bool {
		if !good[i].LastUsedAt.Equal(good[j].LastUsedAt) {
			return good[i].LastUsedAt.After(good[j].LastUsedAt)
		}
		return good[i].CreatedAt.After(good[j].CreatedAt)
	})
	tok := c.issuer.Token(good[0].ID, nodeID)
	c.mu.Lock()
	c.current[nodeID] = cachedToken{token: tok, at: time.Now()}
	c.mu.Unlock()
	return tok, nil
}

// Credential returns the credential of purpose (nodeauth.PurposeRPC,
// PurposeProxy) for the control plane's calls to node nodeID.
func (c *Credentials) Credential(ctx context.Context, nodeID, purpose string) (string, error) {
	tok, err := c.Token(ctx, nodeID)
	if err != nil {
		return "", err
	}
	return nodeauth.Credential(tok, purpose), nil
}

// Grant returns the leave for node requester to pull build buildID from
// node holder (nodeauth.Grant): "" in the insecure mode.
func (c *Credentials) Grant(ctx context.Context, holder, buildID, requester string) (string, error) {
	tok, err := c.Token(ctx, holder)
	if err != nil || tok == "" {
		return "", err
	}
	return nodeauth.Grant(nodeauth.Credential(tok, nodeauth.PurposePull), buildID, requester, time.Now().Add(nodeauth.GrantTTL)), nil
}
