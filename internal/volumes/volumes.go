// Package volumes is the control plane's side of volumes
// (docs/volumes.md): E2B's Volume API over the store's volume rows and
// the nodes that hold the volumes (nodeapi.VolumeService).
//
// A volume lives on one node. Create picks the node, records the volume
// (state creating, the node named) within the team's quota, asks the node
// to make it, then marks it ready; Destroy marks it deleting, has its node
// delete it, then removes the row. Only a ready volume is shown, mounted
// or served; a row a crash left in another state keeps its name and its
// share of the quota until Reconcile finishes its create (by undoing it)
// or its delete.
//
// A volume is in use while a sandbox of its team that is not killed
// (paused ones included) mounts it: the sandboxes' rows name the volumes
// they mount (Mount.VolumeID in store.Spec.VolumeMounts), and the node
// refuses to delete a volume one of its sandboxes mounts, even one whose
// row is not written yet.
package volumes

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Store is what the service needs of the store (*store.SQL).
type Store interface {
	store.Store
	store.VolumeStore
}

// Nodes are the nodes volumes live on: one local node under `warren
// serve`, the registered ones under `warren api` (internal/placement).
type Nodes interface {
	// VolumeCandidates returns the nodes a new volume of sizeMB may go
	// to, best first (ErrExhausted when none is ready).
	VolumeCandidates(ctx context.Context, sizeMB int64) ([]string, error)
	// VolumeNode returns the volume service of node nodeID; ErrUnavailable
	// while the node is unreachable, ErrNotFound when it is not
	// registered.
	VolumeNode(ctx context.Context, nodeID string) (nodeapi.VolumeService, error)
}

// Config configures a Service. Store, Nodes and Lifecycle are required.
type Config struct {
	Store     Store
	Nodes     Nodes
	Lifecycle *lifecycle.Manager
	Logger    *slog.Logger
	// StaleAfter is how long a row may stay creating or deleting before
	// Reconcile finishes it (default 5 minutes: a create takes seconds).
	StaleAfter time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service serves the volumes of every team.
type Service struct {
	cfg   Config
	st    Store
	nodes Nodes
	lc    *lifecycle.Manager
	log   *slog.Logger
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Nodes == nil || cfg.Lifecycle == nil {
		return nil, fmt.Errorf("volumes: store, nodes and lifecycle are required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, st: cfg.Store, nodes: cfg.Nodes, lc: cfg.Lifecycle, log: cfg.Logger}, nil
}

// namePattern is what a volume's name may be.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName checks a volume name.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return errdefs.Publicf(errdefs.ErrInvalid, "volume name %q: 1 to 63 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// Limits are a team's volume limits (store.Limits' volume fields, the
// server's defaults filled in).
type Limits struct {
	MaxVolumes         int
	MaxVolumeSizeMB    int64
	MaxVolumeStorageMB int64
}

// notFound is E2B's answer for a volume the caller has no access to.
func notFound(id string) error {
	return errdefs.Publicf(errdefs.ErrNotFound, "volume %q doesn't exist or you don't have access to it", id)
}

// Create makes volume name of team teamID, of sizeMB (0: the team's
// MaxVolumeSizeMB), on the first candidate node that takes it.
func (s *Service) Create(ctx context.Context, teamID, name string, sizeMB int64, lim Limits) (*store.Volume, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if sizeMB == 0 {
		sizeMB = lim.MaxVolumeSizeMB
	}
	if sizeMB < 0 || (lim.MaxVolumeSizeMB > 0 && sizeMB > lim.MaxVolumeSizeMB) {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "sizeMB %d: a volume is 1 to %d MiB for this team", sizeMB, lim.MaxVolumeSizeMB)
	}
	cands, err := s.nodes.VolumeCandidates(ctx, sizeMB)
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	if len(cands) == 0 {
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "no node can hold a volume of %d MiB now", sizeMB)
	}
	v := &store.Volume{ID: sandbox.NewID(), TeamID: teamID, Name: name, NodeID: cands[0], SizeMB: sizeMB,
		State: store.VolumeCreating, Token: "wvt_" + sandbox.RandomToken(32)}
	if err := s.st.CreateVolume(ctx, v, store.VolumeQuota{MaxVolumes: lim.MaxVolumes, MaxStorageMB: lim.MaxVolumeStorageMB}); err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	log := s.log.With("volume_id", v.ID, "team_id", teamID, "volume_name", name, "size_mb", sizeMB)
	var refusals []error
	for i, nodeID := range cands {
		if i > 0 {
			if _, err := s.st.UpdateVolume(ctx, v.ID, func(r *store.Volume) error { r.NodeID = nodeID; return nil }); err != nil {
				return nil, s.undoCreate(ctx, v, err)
			}
		}
		err := s.makeOn(ctx, nodeID, v)
		if err == nil {
			out, err := s.st.UpdateVolume(ctx, v.ID, func(r *store.Volume) error { r.State = store.VolumeReady; return nil })
			if err != nil {
				return nil, s.undoCreate(ctx, v, err)
			}
			log.Info("volume created", "node_id", nodeID)
			return out, nil
		}
		if !errdefs.IsExhausted(err) && !errdefs.IsUnsupported(err) && !errdefs.IsUnavailable(err) {
			return nil, s.undoCreate(ctx, v, err)
		}
		log.Warn("node refused a volume, trying the next", "node_id", nodeID, "error", err)
		refusals = append(refusals, err)
	}
	if err := s.st.DeleteVolume(ctx, v.ID); err != nil {
		log.Warn("forget refused volume", "error", err)
	}
	return nil, errdefs.WithMessage(fmt.Errorf("volume %q: %w: %w", name, errdefs.ErrExhausted, errors.Join(refusals...)),
		fmt.Sprintf("no node can hold a volume of %d MiB now", sizeMB))
}

func (s *Service) makeOn(ctx context.Context, nodeID string, v *store.Volume) error {
	vs, err := s.nodes.VolumeNode(ctx, nodeID)
	if err != nil {
		return err
	}
	return vs.CreateVolume(ctx, nodeapi.VolumeSpec{ID: v.ID, TeamID: v.TeamID, SizeMB: v.SizeMB})
}

// undoCreate removes the volume a create failed to finish (on its node
// too, in case the node made it) and returns err.
func (s *Service) undoCreate(ctx context.Context, v *store.Volume, err error) error {
	if cur, gerr := s.st.GetVolume(ctx, v.ID); gerr == nil {
		if vs, nerr := s.nodes.VolumeNode(ctx, cur.NodeID); nerr == nil {
			if derr := vs.DeleteVolume(ctx, v.TeamID, v.ID); derr != nil && !errdefs.IsNotFound(derr) {
				s.log.Warn("undo a volume's create on its node; the reconcile retries", "volume_id", v.ID, "error", derr)
				return err
			}
		}
	}
	if derr := s.st.DeleteVolume(ctx, v.ID); derr != nil && !errdefs.IsNotFound(derr) {
		s.log.Warn("undo a volume's create", "volume_id", v.ID, "error", derr)
	}
	return err
}

// Get returns team teamID's ready volume id.
func (s *Service) Get(ctx context.Context, teamID, id string) (*store.Volume, error) {
	v, err := s.st.GetVolume(ctx, id)
	if errdefs.IsNotFound(err) || (err == nil && (v.TeamID != teamID || v.State != store.VolumeReady)) {
		return nil, notFound(id)
	}
	return v, err
}

// List returns team teamID's ready volumes, oldest first.
func (s *Service) List(ctx context.Context, teamID string) ([]*store.Volume, error) {
	return s.st.ListVolumes(ctx, store.VolumeFilter{TeamID: teamID, States: []store.VolumeState{store.VolumeReady}})
}

// Mount is one entry of a sandbox's volume mounts as its row keeps them
// (store.Spec.VolumeMounts): E2B's {name, path} and the volume's ID.
type Mount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	VolumeID string `json:"volumeID"`
}

// RequestedMount is a volume mount as a create names it: a volume of the
// team by name, at an absolute path.
type RequestedMount struct {
	Name string
	Path string
}

// Resolve turns a create's volume mounts into the node's (by ID) and the
// document its row keeps; every volume must be a ready volume of team
// teamID (ErrNotFound otherwise: another team's volume is not found).
func (s *Service) Resolve(ctx context.Context, teamID string, req []RequestedMount) ([]nodeapi.VolumeMount, json.RawMessage, error) {
	if len(req) == 0 {
		return nil, nil, nil
	}
	var node []nodeapi.VolumeMount
	var doc []Mount
	for _, m := range req {
		if err := ValidName(m.Name); err != nil {
			return nil, nil, err
		}
		v, err := s.st.GetVolumeByName(ctx, teamID, m.Name)
		if errdefs.IsNotFound(err) || (err == nil && v.State != store.VolumeReady) {
			return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "volume %q doesn't exist or you don't have access to it", m.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		node = append(node, nodeapi.VolumeMount{ID: v.ID, Path: m.Path})
		doc = append(doc, Mount{Name: v.Name, Path: m.Path, VolumeID: v.ID})
	}
	if err := nodeapi.CheckVolumeMounts(node); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	return node, b, nil
}

// MountsOf reads a sandbox row's volume mounts.
func MountsOf(sb *store.Sandbox) []Mount {
	var ms []Mount
	if len(sb.Spec.VolumeMounts) > 0 {
		json.Unmarshal(sb.Spec.VolumeMounts, &ms) // an unreadable document mounts nothing
	}
	return ms
}

// users returns the sandboxes of v's team that are not killed and mount
// v, by ID.
func (s *Service) users(ctx context.Context, v *store.Volume) ([]string, error) {
	sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TeamID: v.TeamID, States: store.LiveStates})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sb := range sbs {
		if slices.ContainsFunc(MountsOf(sb), func(m Mount) bool { return m.VolumeID == v.ID }) {
			out = append(out, sb.ID)
		}
	}
	return out, nil
}

// Destroy deletes team teamID's volume id with everything in it. A volume
// in use is ErrConflict, unless force: its sandboxes are killed first
// (reason volume_deleted). A volume whose node is lost is forgotten only
// with force (its data stays on that node's disk).
func (s *Service) Destroy(ctx context.Context, teamID, id string, force bool) error {
	v, err := s.st.GetVolume(ctx, id)
	if errdefs.IsNotFound(err) || (err == nil && (v.TeamID != teamID || v.State == store.VolumeCreating)) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	log := s.log.With("volume_id", id, "team_id", teamID, "node_id", v.NodeID)
	users, err := s.users(ctx, v)
	if err != nil {
		return err
	}
	if len(users) > 0 && !force {
		return errdefs.Publicf(errdefs.ErrConflict, "volume %q is mounted by %d sandboxes (%v); kill them, or destroy it with force=true to kill them first",
			v.Name, len(users), users)
	}
	ctx = context.WithoutCancel(ctx)
	for _, sb := range users {
		if err := s.lc.Kill(ctx, teamID, sb, sandbox.KillVolumeDeleted); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("volume %q: kill sandbox %q that mounts it: %w", id, sb, err)
		}
		log.Info("sandbox killed to destroy a volume it mounts", "sandbox_id", sb, "kill_reason", sandbox.KillVolumeDeleted.String())
	}
	if _, err := s.st.UpdateVolume(ctx, id, func(r *store.Volume) error { r.State = store.VolumeDeleting; return nil }); err != nil {
		return err
	}
	if err := s.deleteOnNode(ctx, v, force); err != nil {
		if errdefs.IsConflict(err) {
			// A sandbox mounts it after all (its row not written yet).
			if _, uerr := s.st.UpdateVolume(ctx, id, func(r *store.Volume) error { r.State = store.VolumeReady; return nil }); uerr != nil {
				log.Warn("volume whose delete its node refused stays deleting", "error", uerr)
			}
		}
		return err
	}
	if err := s.st.DeleteVolume(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	log.Info("volume destroyed", "forced", force, "killed", len(users))
	return nil
}

// deleteOnNode has v's node delete it; a node that does not hold it is
// done. With lost, a node that is unavailable is given up on: the
// volume's row goes and its data stays there.
func (s *Service) deleteOnNode(ctx context.Context, v *store.Volume, lost bool) error {
	vs, err := s.nodes.VolumeNode(ctx, v.NodeID)
	if err == nil {
		err = vs.DeleteVolume(ctx, v.TeamID, v.ID)
	}
	switch {
	case err == nil, errdefs.IsNotFound(err):
		return nil
	case lost && errdefs.IsUnavailable(err):
		s.log.Warn("volume's node cannot be reached; its record goes, its data stays on that node", "volume_id", v.ID, "node_id", v.NodeID, "error", err)
		return nil
	case errdefs.IsUnavailable(err):
		return errdefs.WithMessage(err, fmt.Sprintf("the node that holds volume %q cannot be reached; try again, or destroy it with force=true to forget it", v.Name))
	}
	return err
}

// Content authenticates a content call of volume id with token and
// returns the volume and its node's volume service. A wrong token, or a
// volume that is not ready, is ErrUnauthorized (the same for a volume
// that does not exist: IDs are not told apart).
func (s *Service) Content(ctx context.Context, id, token string) (*store.Volume, nodeapi.VolumeService, error) {
	v, err := s.st.GetVolume(ctx, id)
	if err != nil && !errdefs.IsNotFound(err) {
		return nil, nil, err
	}
	if err != nil || v.State != store.VolumeReady || token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(v.Token)) != 1 {
		return nil, nil, errdefs.Publicf(errdefs.ErrUnauthorized, "invalid volume token")
	}
	vs, err := s.nodes.VolumeNode(ctx, v.NodeID)
	if err != nil {
		return nil, nil, errdefs.WithMessage(err, fmt.Sprintf("the node that holds volume %q cannot be reached", v.Name))
	}
	return v, vs, nil
}

// Reconcile finishes what a crash or an unreachable node left: a volume
// creating for longer than Config.StaleAfter is undone (on its node too),
// one deleting as long is deleted again.
func (s *Service) Reconcile(ctx context.Context) error {
	vols, err := s.st.ListVolumes(ctx, store.VolumeFilter{States: []store.VolumeState{store.VolumeCreating, store.VolumeDeleting}})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		if s.cfg.Now().Sub(v.UpdatedAt) < s.cfg.StaleAfter {
			continue
		}
		if err := s.deleteOnNode(ctx, v, false); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.ID, err))
			continue
		}
		if err := s.st.DeleteVolume(ctx, v.ID); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		s.log.Info("volume left half made or half deleted is gone", "volume_id", v.ID, "team_id", v.TeamID, "was", string(v.State))
	}
	return errors.Join(errs...)
}

// Run reconciles every interval until ctx ends.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("volume reconcile", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
