package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

var _ nodeapi.VolumeService = (*Client)(nil)

// volumeErr is the node's answer err in Warren's classes, with the
// message the node chose for a client (noderpc.FromConnectError).
func volumeErr(err error) error { return noderpc.FromConnectError(err) }

func entry(resp *connect.Response[nodepb.VolumeEntryResponse], err error) (*nodeapi.VolumeEntry, error) {
	if err != nil {
		return nil, volumeErr(err)
	}
	return noderpc.VolumeEntryFromProto(resp.Msg.GetEntry())
}

// CreateVolume implements nodeapi.VolumeService.
func (c *Client) CreateVolume(ctx context.Context, spec nodeapi.VolumeSpec) error {
	_, err := c.rpc.CreateVolume(ctx, connect.NewRequest(&nodepb.CreateVolumeRequest{Id: spec.ID, TeamId: spec.TeamID, SizeMb: spec.SizeMB}))
	return volumeErr(err)
}

// DeleteVolume implements nodeapi.VolumeService.
func (c *Client) DeleteVolume(ctx context.Context, teamID, id string) error {
	_, err := c.rpc.DeleteVolume(ctx, connect.NewRequest(&nodepb.DeleteVolumeRequest{TeamId: teamID, Id: id}))
	return volumeErr(err)
}

func pathReq(teamID, id, path string) *connect.Request[nodepb.VolumePathRequest] {
	return connect.NewRequest(&nodepb.VolumePathRequest{TeamId: teamID, Id: id, Path: path})
}

// StatVolumePath implements nodeapi.VolumeService.
func (c *Client) StatVolumePath(ctx context.Context, teamID, id, path string) (*nodeapi.VolumeEntry, error) {
	return entry(c.rpc.StatVolumePath(ctx, pathReq(teamID, id, path)))
}

// ListVolumeDir implements nodeapi.VolumeService.
func (c *Client) ListVolumeDir(ctx context.Context, teamID, id, path string, depth int) ([]nodeapi.VolumeEntry, error) {
	resp, err := c.rpc.ListVolumeDir(ctx, connect.NewRequest(&nodepb.ListVolumeDirRequest{TeamId: teamID, Id: id, Path: path, Depth: int32(depth)}))
	if err != nil {
		return nil, volumeErr(err)
	}
	out := make([]nodeapi.VolumeEntry, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		ve, err := noderpc.VolumeEntryFromProto(e)
		if err != nil {
			return nil, err
		}
		out = append(out, *ve)
	}
	return out, nil
}

// MakeVolumeDir implements nodeapi.VolumeService.
func (c *Client) MakeVolumeDir(ctx context.Context, teamID, id, path string, opts nodeapi.VolumeFileOptions) (*nodeapi.VolumeEntry, error) {
	return entry(c.rpc.MakeVolumeDir(ctx, connect.NewRequest(noderpc.VolumeFileRequestToProto(teamID, id, path, opts))))
}

// SetVolumeMetadata implements nodeapi.VolumeService.
func (c *Client) SetVolumeMetadata(ctx context.Context, teamID, id, path string, md nodeapi.VolumeMetadata) (*nodeapi.VolumeEntry, error) {
	return entry(c.rpc.SetVolumeMetadata(ctx, connect.NewRequest(&nodepb.SetVolumeMetadataRequest{
		TeamId: teamID, Id: id, Path: path, Uid: md.UID, Gid: md.GID, Mode: md.Mode,
	})))
}

// RemoveVolumePath implements nodeapi.VolumeService.
func (c *Client) RemoveVolumePath(ctx context.Context, teamID, id, path string) error {
	_, err := c.rpc.RemoveVolumePath(ctx, pathReq(teamID, id, path))
	return volumeErr(err)
}

// ReadVolumeFile implements nodeapi.VolumeService: the node streams the
// file; the reader reads the stream, and Close ends it.
func (c *Client) ReadVolumeFile(ctx context.Context, teamID, id, path string) (io.ReadCloser, *nodeapi.VolumeEntry, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.ReadVolumeFile(ctx, pathReq(teamID, id, path))
	if err != nil {
		cancel()
		return nil, nil, volumeErr(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			err = fmt.Errorf("node ended a file read without its entry: %w", errdefs.ErrUnavailable)
		}
		return nil, nil, volumeErr(err)
	}
	e, err := noderpc.VolumeEntryFromProto(stream.Msg().GetEntry())
	if err != nil {
		stream.Close()
		cancel()
		return nil, nil, err
	}
	return &streamReader{stream: stream, cancel: cancel}, e, nil
}

// streamReader reads the data of a server stream of chunks.
type streamReader struct {
	stream *connect.ServerStreamForClient[nodepb.VolumeFileChunk]
	cancel context.CancelFunc
	data   []byte
}

func (r *streamReader) Read(b []byte) (int, error) {
	for len(r.data) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, volumeErr(err)
			}
			return 0, io.EOF
		}
		r.data = r.stream.Msg().GetData()
	}
	n := copy(b, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (r *streamReader) Close() error {
	r.cancel()
	return r.stream.Close()
}

// WriteVolumeFile implements nodeapi.VolumeService: r is streamed to the
// node in chunks, the last marked end; a failure of r ends the stream
// without that mark, and the node keeps the file as it was.
func (c *Client) WriteVolumeFile(ctx context.Context, teamID, id, path string, opts nodeapi.VolumeFileOptions, r io.Reader) (*nodeapi.VolumeEntry, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.rpc.WriteVolumeFile(ctx)
	if err := stream.Send(&nodepb.VolumeFileChunk{Request: noderpc.VolumeFileRequestToProto(teamID, id, path, opts)}); err != nil {
		return entry(stream.CloseAndReceive())
	}
	buf := make([]byte, noderpc.VolumeChunkSize)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := stream.Send(&nodepb.VolumeFileChunk{Data: buf[:n]}); err != nil {
				// The node answered already (it refused): its answer says why.
				return entry(stream.CloseAndReceive())
			}
		}
		if errors.Is(rerr, io.EOF) {
			// A refused end mark is the node's answer: CloseAndReceive reads it.
			stream.Send(&nodepb.VolumeFileChunk{End: true})
			return entry(stream.CloseAndReceive())
		}
		if rerr != nil {
			// Cut the stream: the node sees a broken upload, not an end.
			cancel()
			stream.CloseAndReceive() // cancelled
			return nil, fmt.Errorf("write %q: %w", path, rerr)
		}
	}
}
