package buildcontext_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/client/buildcontext"
)

// Build a template with a COPY step through pkg/client: the files are
// read and hashed before the template is created, and uploaded before
// the build starts.
func Example() {
	ctx := context.Background()
	c := client.New(os.Getenv("E2B_API_URL"), os.Getenv("E2B_API_KEY"))
	steps := []client.TemplateStep{{Type: "COPY", Args: []string{"app", "/opt/app", "user", ""}}}
	bc, err := buildcontext.Open("./myapp")
	if err != nil {
		log.Fatal(err)
	}
	defer bc.Close()
	uploads, err := bc.Prepare(steps, nil) // sets steps[0].FilesHash
	if err != nil {
		log.Fatal(err) // errors.Is(err, buildcontext.ErrInvalid) for a missing or escaping source
	}
	created, err := c.CreateTemplate(ctx, client.NewTemplate{Name: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	if err := uploads.Upload(ctx, c, created.TemplateID, log.Printf); err != nil {
		log.Fatal(err)
	}
	if err := c.StartTemplateBuild(ctx, created.TemplateID, created.BuildID, client.TemplateBuild{FromTemplate: "base", Steps: steps}); err != nil {
		log.Fatal(err)
	}
	info, err := c.WaitTemplateBuild(ctx, created.TemplateID, created.BuildID, 0, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Status)
}
