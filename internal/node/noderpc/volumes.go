package noderpc

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// VolumeChunkSize is the size of a file's data messages on the wire.
const VolumeChunkSize = 256 << 10

// VolumeMountsToProto converts ms.
func VolumeMountsToProto(ms []nodeapi.VolumeMount) []*nodepb.VolumeMount {
	var out []*nodepb.VolumeMount
	for _, m := range ms {
		out = append(out, &nodepb.VolumeMount{Id: m.ID, Path: m.Path})
	}
	return out
}

// VolumeMountsFromProto converts ms.
func VolumeMountsFromProto(ms []*nodepb.VolumeMount) []nodeapi.VolumeMount {
	var out []nodeapi.VolumeMount
	for _, m := range ms {
		out = append(out, nodeapi.VolumeMount{ID: m.GetId(), Path: m.GetPath()})
	}
	return out
}

// VolumeEntryToProto converts e.
func VolumeEntryToProto(e *nodeapi.VolumeEntry) *nodepb.VolumeEntry {
	if e == nil {
		return nil
	}
	return &nodepb.VolumeEntry{
		Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
		Atime: Timestamp(e.Atime), Mtime: Timestamp(e.Mtime), Ctime: Timestamp(e.Ctime), Target: e.Target,
	}
}

// VolumeEntryFromProto converts e.
func VolumeEntryFromProto(e *nodepb.VolumeEntry) (*nodeapi.VolumeEntry, error) {
	if e == nil {
		return nil, fmt.Errorf("node answered without a volume entry: %w", errdefs.ErrUnavailable)
	}
	return &nodeapi.VolumeEntry{
		Name: e.GetName(), Path: e.GetPath(), Type: nodeapi.VolumeEntryType(e.GetType()), Size: e.GetSize(), Mode: e.GetMode(),
		UID: e.GetUid(), GID: e.GetGid(), Atime: Time(e.GetAtime()), Mtime: Time(e.GetMtime()), Ctime: Time(e.GetCtime()), Target: e.GetTarget(),
	}, nil
}

// VolumeFileRequestToProto converts a call of MakeVolumeDir or
// WriteVolumeFile.
func VolumeFileRequestToProto(teamID, id, path string, o nodeapi.VolumeFileOptions) *nodepb.VolumeFileRequest {
	return &nodepb.VolumeFileRequest{TeamId: teamID, Id: id, Path: path, Uid: o.UID, Gid: o.GID, Mode: o.Mode, Force: o.Force}
}

func fileOptions(r *nodepb.VolumeFileRequest) nodeapi.VolumeFileOptions {
	return nodeapi.VolumeFileOptions{UID: r.Uid, GID: r.Gid, Mode: r.Mode, Force: r.GetForce()}
}

func (s *server) volumeService() (nodeapi.VolumeService, error) {
	if s.vols != nil {
		return s.vols, nil
	}
	return nil, unsupported("volumes")
}

func entryResponse(e *nodeapi.VolumeEntry) *connect.Response[nodepb.VolumeEntryResponse] {
	return connect.NewResponse(&nodepb.VolumeEntryResponse{Entry: VolumeEntryToProto(e)})
}

func (s *server) CreateVolume(ctx context.Context, req *connect.Request[nodepb.CreateVolumeRequest]) (*connect.Response[nodepb.CreateVolumeResponse], error) {
	vs, err := s.volumeService()
	if err == nil {
		m := req.Msg
		err = vs.CreateVolume(ctx, nodeapi.VolumeSpec{ID: m.GetId(), TeamID: m.GetTeamId(), SizeMB: m.GetSizeMb()})
	}
	if err != nil {
		return nil, s.fail("CreateVolume", err)
	}
	return connect.NewResponse(&nodepb.CreateVolumeResponse{}), nil
}

func (s *server) DeleteVolume(ctx context.Context, req *connect.Request[nodepb.DeleteVolumeRequest]) (*connect.Response[nodepb.DeleteVolumeResponse], error) {
	vs, err := s.volumeService()
	if err == nil {
		err = vs.DeleteVolume(ctx, req.Msg.GetTeamId(), req.Msg.GetId())
	}
	if err != nil {
		return nil, s.fail("DeleteVolume", err)
	}
	return connect.NewResponse(&nodepb.DeleteVolumeResponse{}), nil
}

func (s *server) StatVolumePath(ctx context.Context, req *connect.Request[nodepb.VolumePathRequest]) (*connect.Response[nodepb.VolumeEntryResponse], error) {
	vs, err := s.volumeService()
	if err != nil {
		return nil, s.fail("StatVolumePath", err)
	}
	m := req.Msg
	e, err := vs.StatVolumePath(ctx, m.GetTeamId(), m.GetId(), m.GetPath())
	if err != nil {
		return nil, s.fail("StatVolumePath", err)
	}
	return entryResponse(e), nil
}

func (s *server) ListVolumeDir(ctx context.Context, req *connect.Request[nodepb.ListVolumeDirRequest]) (*connect.Response[nodepb.ListVolumeDirResponse], error) {
	vs, err := s.volumeService()
	if err != nil {
		return nil, s.fail("ListVolumeDir", err)
	}
	m := req.Msg
	es, err := vs.ListVolumeDir(ctx, m.GetTeamId(), m.GetId(), m.GetPath(), int(m.GetDepth()))
	if err != nil {
		return nil, s.fail("ListVolumeDir", err)
	}
	out := &nodepb.ListVolumeDirResponse{Entries: make([]*nodepb.VolumeEntry, 0, len(es))}
	for i := range es {
		out.Entries = append(out.Entries, VolumeEntryToProto(&es[i]))
	}
	return connect.NewResponse(out), nil
}

func (s *server) MakeVolumeDir(ctx context.Context, req *connect.Request[nodepb.VolumeFileRequest]) (*connect.Response[nodepb.VolumeEntryResponse], error) {
	vs, err := s.volumeService()
	if err != nil {
		return nil, s.fail("MakeVolumeDir", err)
	}
	m := req.Msg
	e, err := vs.MakeVolumeDir(ctx, m.GetTeamId(), m.GetId(), m.GetPath(), fileOptions(m))
	if err != nil {
		return nil, s.fail("MakeVolumeDir", err)
	}
	return entryResponse(e), nil
}

func (s *server) SetVolumeMetadata(ctx context.Context, req *connect.Request[nodepb.SetVolumeMetadataRequest]) (*connect.Response[nodepb.VolumeEntryResponse], error) {
	vs, err := s.volumeService()
	if err != nil {
		return nil, s.fail("SetVolumeMetadata", err)
	}
	m := req.Msg
	e, err := vs.SetVolumeMetadata(ctx, m.GetTeamId(), m.GetId(), m.GetPath(), nodeapi.VolumeMetadata{UID: m.Uid, GID: m.Gid, Mode: m.Mode})
	if err != nil {
		return nil, s.fail("SetVolumeMetadata", err)
	}
	return entryResponse(e), nil
}

func (s *server) RemoveVolumePath(ctx context.Context, req *connect.Request[nodepb.VolumePathRequest]) (*connect.Response[nodepb.RemoveVolumePathResponse], error) {
	vs, err := s.volumeService()
	if err == nil {
		m := req.Msg
		err = vs.RemoveVolumePath(ctx, m.GetTeamId(), m.GetId(), m.GetPath())
	}
	if err != nil {
		return nil, s.fail("RemoveVolumePath", err)
	}
	return connect.NewResponse(&nodepb.RemoveVolumePathResponse{}), nil
}

func (s *server) ReadVolumeFile(ctx context.Context, req *connect.Request[nodepb.VolumePathRequest], stream *connect.ServerStream[nodepb.VolumeFileChunk]) error {
	vs, err := s.volumeService()
	if err != nil {
		return s.fail("ReadVolumeFile", err)
	}
	m := req.Msg
	r, e, err := vs.ReadVolumeFile(ctx, m.GetTeamId(), m.GetId(), m.GetPath())
	if err != nil {
		return s.fail("ReadVolumeFile", err)
	}
	defer r.Close()
	if err := stream.Send(&nodepb.VolumeFileChunk{Entry: VolumeEntryToProto(e)}); err != nil {
		return err
	}
	buf := make([]byte, VolumeChunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := stream.Send(&nodepb.VolumeFileChunk{Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return s.fail("ReadVolumeFile", fmt.Errorf("read %q: %w", m.GetPath(), errors.Join(errdefs.ErrUnavailable, err)))
		}
	}
}

func (s *server) WriteVolumeFile(ctx context.Context, stream *connect.ClientStream[nodepb.VolumeFileChunk]) (*connect.Response[nodepb.VolumeEntryResponse], error) {
	vs, err := s.volumeService()
	if err != nil {
		return nil, s.fail("WriteVolumeFile", err)
	}
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, s.fail("WriteVolumeFile", fmt.Errorf("write of a volume file without a request: %w", errdefs.ErrInvalid))
	}
	h := stream.Msg().GetRequest()
	if h == nil {
		return nil, s.fail("WriteVolumeFile", fmt.Errorf("write of a volume file without a request: %w", errdefs.ErrInvalid))
	}
	e, err := vs.WriteVolumeFile(ctx, h.GetTeamId(), h.GetId(), h.GetPath(), fileOptions(h),
		&chunkReader{data: stream.Msg().GetData(), end: stream.Msg().GetEnd(), stream: stream})
	if err != nil {
		return nil, s.fail("WriteVolumeFile", err)
	}
	return entryResponse(e), nil
}

// chunkReader reads the data of a client stream of chunks, up to the
// message marked end; a stream that stops before it is a cut upload.
type chunkReader struct {
	data   []byte
	end    bool
	stream *connect.ClientStream[nodepb.VolumeFileChunk]
}

func (c *chunkReader) Read(b []byte) (int, error) {
	for len(c.data) == 0 {
		if c.end {
			return 0, io.EOF
		}
		if !c.stream.Receive() {
			if err := c.stream.Err(); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("upload ended before its last chunk: %w", io.ErrUnexpectedEOF)
		}
		c.data, c.end = c.stream.Msg().GetData(), c.stream.Msg().GetEnd()
	}
	n := copy(b, c.data)
	c.data = c.data[n:]
	return n, nil
}
