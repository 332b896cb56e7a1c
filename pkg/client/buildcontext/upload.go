package buildcontext

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/warren-sandbox/warren/pkg/client"
)

// Uploads are the files of each COPY/ADD step of a build, read before the
// build is created (a missing file leaves no waiting build behind).
type Uploads struct {
	bc    *Context
	steps []client.TemplateStep
	files map[int][]File // by step index
	srcs  map[int]string // the sources read, by step index
}

// Prepare reads the files of every COPY and ADD step of steps (Args[0]
// the source, Args[1] the destination) and sets the step's FilesHash.
// srcs, when non-nil, gives a step's source as the caller resolved it
// (`warren template build` expands Dockerfile variables in it) in place
// of Args[0]. The returned Uploads keep steps for Upload.
func (bc *Context) Prepare(steps []client.TemplateStep, srcs map[int]string) (*Uploads, error) {
	up := &Uploads{bc: bc, steps: steps, files: map[int][]File{}, srcs: map[int]string{}}
	for i := range steps {
		st := &steps[i]
		if st.Type != "COPY" && st.Type != "ADD" {
			continue
		}
		if len(st.Args) < 2 {
			return nil, fmt.Errorf("step %d: %s needs a source and a destination: %w", i+1, st.Type, ErrInvalid)
		}
		src, ok := srcs[i]
		if !ok {
			src = st.Args[0]
		}
		if strings.Contains(src, "://") {
			return nil, fmt.Errorf("step %d: %s from a URL is not supported; download it in a RUN step: %w", i+1, st.Type, ErrUnsupported)
		}
		files, err := bc.Files(src)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		hash, err := bc.Hash("COPY", src, st.Args[1], files)
		if err != nil {
			return nil, fmt.Errorf("step %d: hash %s: %w", i+1, src, err)
		}
		st.FilesHash = hash
		up.files[i], up.srcs[i] = files, src
	}
	return up, nil
}

// Upload uploads the files of each step that the server does not have yet
// for the template (one upload per distinct hash). logf, when set,
// reports each step's upload or cache hit.
func (up *Uploads) Upload(ctx context.Context, c *client.Client, templateID string, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	done := map[string]bool{}
	for i, st := range up.steps {
		files, ok := up.files[i]
		if !ok || done[st.FilesHash] {
			continue
		}
		done[st.FilesHash] = true
		u, err := c.TemplateFiles(ctx, templateID, st.FilesHash)
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		src := up.srcs[i]
		if u.Present || u.URL == "" {
			logf("[%d] %s %s: files already on the server", i+1, st.Type, src)
			continue
		}
		size, err := up.bc.uploadTar(ctx, c, u, files)
		if err != nil {
			return fmt.Errorf("step %d: %s %s: %w", i+1, st.Type, src, err)
		}
		logf("[%d] %s %s: uploaded %d files (%d bytes)", i+1, st.Type, src, len(files), size)
	}
	return nil
}

// uploadTar spools files as a gzip'd tar to a temporary file (memory stays
// bounded, the size is known) and PUTs it to the upload URL.
func (bc *Context) uploadTar(ctx context.Context, c *client.Client, u *client.FilesUpload, files []File) (int64, error) {
	tmp, err := os.CreateTemp("", "warren-context-*.tar.gz")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := bc.WriteTarGz(tmp, files); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return size, c.UploadFiles(ctx, u, tmp, size)
}
