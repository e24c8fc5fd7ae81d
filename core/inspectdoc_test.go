package core_test

// The Go example of "In Go" in docs/inspector.md, compiled: the region
// below (between "inspector.md begins" and "inspector.md ends", one tab
// in) is a go block of the page, which TestInspectDocExample checks, and
// it runs.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/internal/docsample"
)

func printInspection(ctx context.Context, engine *core.Engine) error {
	// inspector.md begins
	rep, err := engine.Inspect(ctx, core.InspectQuery{Principal: "alice", Resource: "todos", Key: "t1"})
	if err != nil {
		return err
	}
	for _, c := range rep.Connections {
		for _, s := range c.Subscriptions {
			fmt.Printf("%s %s %s: %s (%s)\n", rep.Node, c.Origin, s.Scope, s.Verdict, s.Reason)
		}
	}
	// inspector.md ends
	return nil
}

// TestInspectDocExample: the example of docs/inspector.md is in the page
// as written here, and runs.
func TestInspectDocExample(t *testing.T) {
	docsample.Contained(t, "inspector.md")
	_, file, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "docs", "inspector.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The page's JSON answer decodes into InspectReport field by field.
	js := string(doc)
	k := strings.Index(js, "```json\n")
	l := strings.Index(js[k+8:], "```")
	if k < 0 || l < 0 {
		t.Fatal("no json block in docs/inspector.md")
	}
	dec := json.NewDecoder(strings.NewReader(js[k+8 : k+8+l]))
	dec.DisallowUnknownFields()
	var rep core.InspectReport
	if err := dec.Decode(&rep); err != nil || rep.Verdict != core.VerdictDelivered || len(rep.Connections) != 1 {
		t.Fatalf("the json block of docs/inspector.md: %v %+v", err, rep)
	}
	s2 := newServer(t, core.Config{})
	c := s2.dial(t, "alice", "p7")
	c.hello()
	c.Subscribe("s", "todos", project("p7"))
	c.collect("s")
	if err := printInspection(context.Background(), s2.e); err != nil {
		t.Fatal(err)
	}
}
