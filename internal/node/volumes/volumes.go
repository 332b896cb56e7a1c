// Package volumes keeps a node's volumes (docs/volumes.md): per-team file
// systems of a fixed size that sandboxes of the team mount and that the
// content API reads and writes without a sandbox.
//
// Each volume is a sparse ext4 image of its size on the node's disk,
// attached to a loop device and mounted nodev, nosuid, noexec on the
// host, as the sandboxes' writable layers are (package rootfs): the
// kernel bounds its usage (a write past its size gets ENOSPC) and the
// host's disk is not touched beyond it. Layout under Config.Root:
//
//	vol-<id>/volume.json   what the volume is (ID, team, size)
//	vol-<id>/volume.img    the ext4 image
//	vol-<id>/fs/           its mount point
//	vol-<id>/fs/data/      the volume's content: what sandboxes mount, the content API serves
//	vol-<id>/fs/.staging/  content API writes in flight, renamed into data/ once synced
//	.new-<id>/             a volume being made (renamed to vol-<id> when whole)
//	.del-<id>/             a volume being deleted
//
// A volume survives restarts of the node and of the machine: New mounts
// every volume again (ext4's journal replays what a crash left) and
// clears its staging directory, so a write cut short leaves nothing
// behind and a write that was acknowledged is on disk (synced, then
// renamed, then its directory synced).
//
// Paths a tenant names are resolved inside the volume's data directory by
// the kernel (openat2 with RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS and
// RESOLVE_NO_XDEV): ".." stops at the volume's root, a symbolic link is
// followed as if the volume were "/", and the last component of a path
// is acted on through a file descriptor or with no-follow flags, never
// by a path call that follows a link the tenant may have just put there.
//
// A volume is in use while a sandbox of the node (running or paused)
// mounts it (Acquire, Release) or a content call is in flight; it cannot
// be deleted then.
package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Defaults of Config.
const (
	DefaultOwner         = 1000 // uid and gid of the templates' user ("user")
	DefaultMinFreeDiskMB = 1024
	DefaultDetachWait    = 15 * time.Second
)

// Config configures a Manager.
type Config struct {
	// Root holds the volumes (the node's <data-dir>/volumes).
	Root string
	// Mkfs is the mkfs.ext4 binary; default "mkfs.ext4" from PATH.
	Mkfs string
	// OwnerUID and OwnerGID own a new volume's root directory, so that
	// the sandboxes' user can write there; default 1000 (the templates'
	// "user"). Root inside a sandbox writes anywhere.
	OwnerUID, OwnerGID *uint32
	// MinFreeDiskMB is the space left free on Root's file system beyond a
	// new volume's image (whose size a create must fit in, though the
	// image is sparse); default 1024, negative disables the check.
	MinFreeDiskMB int64
	// FreeDisk reports the bytes free on the file system of path; nil
	// means statfs.
	FreeDisk func(path string) (uint64, error)
	// DetachWait bounds the wait for the file system of an unmounted
	// volume to be written back (rootfs.WaitDetached); default 15 s.
	DetachWait time.Duration
	// Registry receives the volumes' metrics; nil registers none.
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Manager keeps the volumes under Config.Root. It implements
// nodeapi.VolumeService, and gives the node agent the mounts of its
// sandboxes (Acquire, Release). Its methods are safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	owner [2]uint32
	host  host

	mu   sync.Mutex
	vols map[string]*volume
	// users holds the volumes each sandbox mounts (sandbox ID → IDs).
	users map[string][]string

	count prometheus.GaugeFunc
	bytes *prometheus.CounterVec
}

var _ nodeapi.VolumeService = (*Manager)(nil)

// volume is one volume the Manager holds. Guarded by Manager.mu but for
// meta and dir, which do not change, and the open directories, which
// change only while no call uses them (busy 0, under deleting).
type volume struct {
	meta meta
	dir  string
	// users are the sandboxes that mount it; busy counts the content
	// calls in flight; deleting is set once a delete began.
	users    map[string]bool
	busy     int
	deleting bool
	// data and staging are the open fs/data and fs/.staging directories.
	data, staging *os.File
}

// meta is the content of volume.json.
type meta struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	TeamID  string `json:"teamId"`
	SizeMB  int64  `json:"sizeMB"`
}

const metaVersion = 1

// Names under Config.Root and in a volume's directory.
const (
	volPrefix  = "vol-"
	newPrefix  = ".new-"
	delPrefix  = ".del-"
	metaFile   = "volume.json"
	imageFile  = "volume.img"
	fsDir      = "fs"
	dataDir    = "data"
	stagingDir = ".staging"
)

// New opens the volumes under cfg.Root: every volume is mounted (again
// after a reboot), what a crash left of a create or a delete goes, and
// each volume's staging directory is cleared.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("volumes root %q: not absolute: %w", cfg.Root, errdefs.ErrInvalid)
	}
	cfg.Root = filepath.Clean(cfg.Root)
	if cfg.Mkfs == "" {
		cfg.Mkfs = "mkfs.ext4"
	}
	if cfg.MinFreeDiskMB == 0 {
		cfg.MinFreeDiskMB = DefaultMinFreeDiskMB
	}
	if cfg.DetachWait <= 0 {
		cfg.DetachWait = DefaultDetachWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, owner: [2]uint32{DefaultOwner, DefaultOwner}, vols: map[string]*volume{}, users: map[string][]string{}}
	if cfg.OwnerUID != nil {
		m.owner[0] = *cfg.OwnerUID
	}
	if cfg.OwnerGID != nil {
		m.owner[1] = *cfg.OwnerGID
	}
	if cfg.FreeDisk == nil {
		m.cfg.FreeDisk = freeDisk
	}
	h, err := newHost(cfg.Mkfs, cfg.DetachWait)
	if err != nil {
		return nil, err
	}
	m.host = h
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("volumes root %s: %w", cfg.Root, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := m.initMetrics(cfg.Registry); err != nil {
		return nil, err
	}
	if err := m.open(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// open mounts the volumes found under the root.
func (m *Manager) open(ctx context.Context) error {
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		return fmt.Errorf("volumes root %s: %w", m.cfg.Root, errors.Join(errdefs.ErrUnavailable, err))
	}
	for _, e := range entries {
		name, p := e.Name(), filepath.Join(m.cfg.Root, e.Name())
		switch {
		case strings.HasPrefix(name, newPrefix), strings.HasPrefix(name, delPrefix):
			// A create or a delete cut short: it goes.
			if err := m.host.unmount(ctx, p); err != nil {
				m.log.Warn("volume left by a crash: unmount", "dir", p, "error", err)
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				m.log.Warn("volume left by a crash: remove", "dir", p, "error", err)
			}
			continue
		case !strings.HasPrefix(name, volPrefix) || !e.IsDir():
			continue
		}
		md, err := readMeta(p)
		if err != nil || volPrefix+md.ID != name {
			m.log.Warn("unreadable volume directory left alone", "dir", p, "error", err)
			continue
		}
		v := &volume{meta: md, dir: p, users: map[string]bool{}}
		if err := m.mount(ctx, v); err != nil {
			// Kept, unmounted: its calls fail until a restart mounts it.
			m.log.Error("mount volume", "volume_id", md.ID, "error", err)
		}
		m.vols[md.ID] = v
		m.log.Info("volume mounted", "volume_id", md.ID, "team_id", md.TeamID, "size_mb", md.SizeMB)
	}
	return nil
}

// mount mounts v's image (unless it is mounted: the node restarted, the
// machine did not), makes its data and staging directories, empties the
// staging one and opens both.
func (m *Manager) mount(ctx context.Context, v *volume) error {
	mnt := filepath.Join(v.dir, fsDir)
	if err := m.host.mount(ctx, filepath.Join(v.dir, imageFile), mnt); err != nil {
		return err
	}
	data, staging := filepath.Join(mnt, dataDir), filepath.Join(mnt, stagingDir)
	if err := os.Mkdir(data, 0o755); err == nil {
		if err := os.Chown(data, int(m.owner[0]), int(m.owner[1])); err != nil {
			return errors.Join(errdefs.ErrUnavailable, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if err := os.RemoveAll(staging); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	d, err := openDir(data)
	if err != nil {
		return err
	}
	s, err := openDir(staging)
	if err != nil {
		d.Close()
		return err
	}
	v.data, v.staging = d, s
	return nil
}

// Close closes the volumes' open directories; their mounts stay for the
// sandboxes that use them and the next Manager.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.vols {
		v.closeDirs()
	}
	return nil
}

func (v *volume) closeDirs() {
	if v.data != nil {
		v.data.Close()
		v.data = nil
	}
	if v.staging != nil {
		v.staging.Close()
		v.staging = nil
	}
}

// CreateVolume implements nodeapi.VolumeService.
func (m *Manager) CreateVolume(ctx context.Context, spec nodeapi.VolumeSpec) error {
	switch {
	case !sandbox.ValidID(spec.ID):
		return fmt.Errorf("volume id %q: %w", spec.ID, errdefs.ErrInvalid)
	case spec.TeamID == "":
		return fmt.Errorf("volume %q: no team: %w", spec.ID, errdefs.ErrInvalid)
	case spec.SizeMB <= 0:
		return fmt.Errorf("volume %q: size %d MiB: %w", spec.ID, spec.SizeMB, errdefs.ErrInvalid)
	}
	v, err := m.reserve(spec)
	if err != nil {
		return err
	}
	return m.created(v, m.create(ctx, v))
}

// reserve holds volume spec.ID as deleting until it is made: no call or
// create of it meanwhile.
func (m *Manager) reserve(spec nodeapi.VolumeSpec) (*volume, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vols[spec.ID]; ok {
		return nil, fmt.Errorf("volume %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	v := &volume{meta: meta{Version: metaVersion, ID: spec.ID, TeamID: spec.TeamID, SizeMB: spec.SizeMB},
		dir: filepath.Join(m.cfg.Root, volPrefix+spec.ID), users: map[string]bool{}, deleting: true}
	m.vols[spec.ID] = v
	return v, nil
}

// created ends the making of v that reserve held: it is usable, or gone
// when err is the making's failure.
func (m *Manager) created(v *volume, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.vols, v.meta.ID)
		return fmt.Errorf("volume %q: %w", v.meta.ID, err)
	}
	v.deleting = false
	m.log.Info("volume created", "volume_id", v.meta.ID, "team_id", v.meta.TeamID, "size_mb", v.meta.SizeMB)
	return nil
}

func (m *Manager) create(ctx context.Context, v *volume) error {
	need := m.host.imageBytes(v.meta.SizeMB)
	if m.cfg.MinFreeDiskMB >= 0 {
		free, err := m.cfg.FreeDisk(m.cfg.Root)
		if err != nil {
			return errors.Join(errdefs.ErrUnavailable, err)
		}
		if int64(free) < need+m.cfg.MinFreeDiskMB<<20 {
			return errdefs.Publicf(errdefs.ErrExhausted, "the node has no room for a volume of %d MiB", v.meta.SizeMB)
		}
	}
	tmp := filepath.Join(m.cfg.Root, newPrefix+v.meta.ID)
	if err := os.RemoveAll(tmp); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if _, err := os.Lstat(v.dir); err == nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("directory of a volume not held: %w", errdefs.ErrAlreadyExists)
	}
	fail := func(err error) error {
		os.RemoveAll(tmp)
		return err
	}
	if err := m.host.makeImage(ctx, filepath.Join(tmp, imageFile), v.meta.SizeMB); err != nil {
		return fail(err)
	}
	b, err := json.Marshal(v.meta)
	if err != nil {
		return fail(err)
	}
	if err := atomicfile.Write(filepath.Join(tmp, metaFile), b, 0o600); err != nil {
		return fail(errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := os.Rename(tmp, v.dir); err != nil {
		return fail(errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := syncDir(m.cfg.Root); err != nil {
		m.log.Warn("sync volumes root", "error", err)
	}
	if err := m.mount(ctx, v); err != nil {
		m.remove(ctx, v)
		return err
	}
	return nil
}

// DeleteVolume implements nodeapi.VolumeService.
func (m *Manager) DeleteVolume(ctx context.Context, teamID, id string) error {
	v, err := m.beginDelete(teamID, id)
	if err != nil {
		return err
	}
	if err := m.remove(ctx, v); err != nil {
		m.undoDelete(ctx, v)
		return fmt.Errorf("volume %q: delete: %w", id, err)
	}
	m.dropVolume(id)
	m.log.Info("volume deleted", "volume_id", id, "team_id", teamID)
	return nil
}

// beginDelete marks team teamID's volume id deleting and closes its
// directories, unless it is in use.
func (m *Manager) beginDelete(teamID, id string) (*volume, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vols[id]
	switch {
	case !ok || v.meta.TeamID != teamID:
		return nil, fmt.Errorf("volume %q: %w", id, errdefs.ErrNotFound)
	case v.deleting:
		return nil, errdefs.Publicf(errdefs.ErrConflict, "volume %q is being created or deleted", id)
	case len(v.users) > 0:
		users := slices.Sorted(mapsKeys(v.users))
		return nil, errdefs.Publicf(errdefs.ErrConflict, "volume %q is mounted by %d sandboxes (%s)", id, len(users), strings.Join(users, ", "))
	case v.busy > 0:
		return nil, errdefs.Publicf(errdefs.ErrConflict, "volume %q has content calls in flight", id)
	}
	v.deleting = true
	v.closeDirs()
	return v, nil
}

// undoDelete opens v again after its delete failed.
func (m *Manager) undoDelete(ctx context.Context, v *volume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v.deleting = false
	if err := m.mount(ctx, v); err != nil {
		m.log.Warn("volume whose delete failed could not be opened again", "volume_id", v.meta.ID, "error", err)
	}
}

func (m *Manager) dropVolume(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.vols, id)
}

// remove unmounts v and removes its directory (renamed aside first, so
// that a crash half way leaves a .del- directory New removes).
func (m *Manager) remove(ctx context.Context, v *volume) error {
	if err := m.host.unmount(ctx, v.dir); err != nil {
		return err
	}
	aside := filepath.Join(m.cfg.Root, delPrefix+v.meta.ID)
	if err := os.RemoveAll(aside); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if err := os.Rename(v.dir, aside); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if err := syncDir(m.cfg.Root); err != nil {
		m.log.Warn("sync volumes root", "error", err)
	}
	if err := os.RemoveAll(aside); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	return nil
}

// Acquire records that sandbox sandboxID of team teamID mounts mounts
// and returns their bind mounts for its runtime spec. A volume the node
// does not hold, of another team, or being deleted is ErrNotFound. It
// may be called again for the same sandbox (a resume, or the agent's
// recovery after a restart): the sandbox then uses exactly mounts.
func (m *Manager) Acquire(sandboxID, teamID string, mounts []nodeapi.VolumeMount) ([]driver.Mount, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]driver.Mount, 0, len(mounts))
	for _, vm := range mounts {
		v, ok := m.vols[vm.ID]
		if !ok || v.meta.TeamID != teamID || v.deleting {
			return nil, errdefs.Publicf(errdefs.ErrNotFound, "volume %q not found", vm.ID)
		}
		if v.data == nil {
			return nil, fmt.Errorf("volume %q is not mounted on the node: %w", vm.ID, errdefs.ErrUnavailable)
		}
		out = append(out, driver.Mount{Source: filepath.Join(v.dir, fsDir, dataDir), Destination: vm.Path, Type: "bind"})
	}
	m.releaseLocked(sandboxID)
	ids := make([]string, 0, len(mounts))
	for _, vm := range mounts {
		m.vols[vm.ID].users[sandboxID] = true
		ids = append(ids, vm.ID)
	}
	if len(ids) > 0 {
		m.users[sandboxID] = ids
	}
	return out, nil
}

// Release records that sandbox sandboxID mounts no volume any more (it
// is gone).
func (m *Manager) Release(sandboxID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(sandboxID)
}

func (m *Manager) releaseLocked(sandboxID string) {
	for _, id := range m.users[sandboxID] {
		if v, ok := m.vols[id]; ok {
			delete(v.users, sandboxID)
		}
	}
	delete(m.users, sandboxID)
}

// Users returns the sandboxes that mount volume id, sorted.
func (m *Manager) Users(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.vols[id]; ok {
		return slices.Sorted(mapsKeys(v.users))
	}
	return nil
}

// IDs returns the IDs of the volumes the node holds, sorted.
func (m *Manager) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.vols))
	for id, v := range m.vols {
		if !v.deleting {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// use takes a content call's hold on team teamID's volume id; the
// returned func gives it back.
func (m *Manager) use(teamID, id string) (*volume, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vols[id]
	if !ok || v.meta.TeamID != teamID || v.deleting {
		return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "volume %q not found", id)
	}
	if v.data == nil {
		return nil, nil, fmt.Errorf("volume %q is not mounted on the node: %w", id, errdefs.ErrUnavailable)
	}
	v.busy++
	var once sync.Once
	return v, func() { once.Do(func() { m.unuse(v) }) }, nil
}

// unuse gives back a content call's hold on v (use).
func (m *Manager) unuse(v *volume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v.busy--
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func readMeta(dir string) (meta, error) {
	var md meta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return md, err
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return md, fmt.Errorf("%s: %w", metaFile, err)
	}
	if md.Version != metaVersion {
		return md, fmt.Errorf("%s: version %d: %w", metaFile, md.Version, errdefs.ErrUnsupported)
	}
	return md, nil
}

func (m *Manager) initMetrics(reg prometheus.Registerer) error {
	m.count = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "node_volumes",
		Help: "Volumes held by this node.",
	}, func() float64 { return float64(len(m.IDs())) })
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volume_content_bytes_total",
		Help: "Bytes read from and written to volumes through the content API, by direction (read, write).",
	}, []string{"direction"})
	m.bytes.WithLabelValues("read")
	m.bytes.WithLabelValues("write")
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.count, m.bytes} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("volume metrics: %w", err)
		}
	}
	return nil
}
