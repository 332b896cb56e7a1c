package builder

import (
	"context"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// What the build services (Service here, nodebuild.Remote for `warren
// api`) answer from the catalog alike.

// OwnedTemplate finds team's template templateID (templates.Catalog.Owned:
// another team's template, public or not, is not found).
func OwnedTemplate(ctx context.Context, cat *templates.Catalog, teamID, templateID string) (*templates.Template, error) {
	return cat.Owned(ctx, teamID, templateID)
}

// WaitingBuild resolves req to team's template and the waiting build it
// starts: when req.BuildID is empty it first makes the template and build
// from req.Create with create (the CLI's one-call path). A template of
// another team, a build of another template and a build that is not
// waiting are refused.
func WaitingBuild(ctx context.Context, cat *templates.Catalog, req *StartRequest,
	create func(context.Context, templates.CreateRequest) (*templates.Template, *templates.Build, error)) (*templates.Template, *templates.Build, error) {
	if req.BuildID == "" {
		req.Create.TeamID = req.TeamID
		t, b, err := create(ctx, req.Create)
		if err != nil {
			return nil, nil, err
		}
		req.TemplateID, req.BuildID = t.ID, b.ID
	}
	t, err := OwnedTemplate(ctx, cat, req.TeamID, req.TemplateID)
	if err != nil {
		return nil, nil, err
	}
	bd, err := cat.Build(ctx, req.BuildID)
	if err != nil {
		return nil, nil, err
	}
	if bd.TemplateID != t.ID {
		return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "build %q of template %q", req.BuildID, req.TemplateID)
	}
	if bd.Status != templates.BuildWaiting {
		return nil, nil, errdefs.Publicf(errdefs.ErrConflict, "build %q is %s, not waiting", req.BuildID, bd.Status)
	}
	return t, bd, nil
}

// BuildStatus reports a build of team's own template with its log
// entries from logsOffset on. A build's status and log are its owner's
// alone: the log holds every step line as expanded and all RUN output.
func BuildStatus(ctx context.Context, cat *templates.Catalog, teamID, templateID, buildID string, logsOffset int) (*Status, error) {
	t, err := cat.Owned(ctx, teamID, templateID)
	if err != nil {
		return nil, err
	}
	bd, err := cat.Build(ctx, buildID)
	if err != nil {
		return nil, err
	}
	if bd.TemplateID != t.ID {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "build %q of template %q", buildID, templateID)
	}
	entries, err := cat.Store().Logs(ctx, buildID, max(logsOffset, 0))
	if err != nil {
		return nil, err
	}
	if entries == nil {
		entries = []templates.LogEntry{}
	}
	return &Status{TemplateID: t.ID, BuildID: bd.ID, Status: bd.Status, LogEntries: entries, Reason: bd.Reason}, nil
}

// BuildLogs returns the entries of a build's log that q selects.
func BuildLogs(ctx context.Context, cat *templates.Catalog, teamID, templateID, buildID string, q LogsQuery) ([]templates.LogEntry, error) {
	st, err := BuildStatus(ctx, cat, teamID, templateID, buildID, 0)
	if err != nil {
		return nil, err
	}
	return SelectLogs(st.LogEntries, q), nil
}
