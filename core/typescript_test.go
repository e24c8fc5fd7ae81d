package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

var updateTS = flag.Bool("update-ts", false, "rewrite client/js/test/schema.gen.ts from the test engine")

// The test engine's declarations: every column kind, nullable columns,
// scope columns of several types, mutators with arguments of many JSON
// shapes, and channels with and without presence.

type tsBoard struct {
	ID    string `tide:"id,pk"`
	Owner string `tide:"owner,scope"`
	Name  string `tide:"name"`
}

type tsCard struct {
	ID      int64           `tide:"id,pk"`
	BoardID string          `tide:"board_id,scope"`
	Lane    int             `tide:"lane,scope"`
	Title   string          `tide:"title"`
	Done    bool            `tide:"done"`
	Weight  float64         `tide:"weight"`
	Votes   uint32          `tide:"votes"`
	Note    *string         `tide:"note"`
	Due     *time.Time      `tide:"due"`
	Blob    []byte          `tide:"blob"`
	Meta    json.RawMessage `tide:"meta"`
	At      time.Time       `tide:"at"`
	Local   string          // not synced
}

// tsCardHeading is tsCard with its title column renamed heading.
type tsCardHeading struct {
	ID      int64  `tide:"id,pk"`
	BoardID string `tide:"board_id,scope"`
	Lane    int    `tide:"lane,scope"`
	Heading string `tide:"heading"`
}

// tsCardLaneText is tsCard with a text lane.
type tsCardLaneText struct {
	ID      int64  `tide:"id,pk"`
	BoardID string `tide:"board_id,scope"`
	Lane    string `tide:"lane,scope"`
	Title   string `tide:"title"`
}

type tsCardRef struct {
	ID int64 `json:"id"`
}

type tsAddCard struct {
	BoardID string            `json:"board_id"`
	Title   string            `json:"title"`
	Lane    int               `json:"lane,omitempty"`
	Tags    []string          `json:"tags"`
	Due     *time.Time        `json:"due"`
	Extra   map[string]int    `json:"extra,omitempty"`
	Size    int64             `json:"size,string,omitempty"`
	Any     any               `json:"any,omitempty"`
	Nested  struct{ N []int } `json:"nested"`
	Skip    string            `json:"-"`
}

// tsAddCardName is tsAddCard with title renamed name.
type tsAddCardName struct {
	BoardID string `json:"board_id"`
	Name    string `json:"name"`
}

type tsMoveCard struct {
	tsCardRef
	Lane int `json:"lane"`
}

type tsRenameBoard struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type tsCursor struct {
	X     float64 `json:"x"`
	Y     float64 `json:"y"`
	Label string  `json:"label,omitempty"`
}

// tsViewer is the presence state of the board channel.
type tsViewer struct {
	Name   string `json:"name"`
	Color  string `json:"color,omitempty"`
	Typing bool   `json:"typing"`
}

// tsViewerWho is tsViewer with its name field renamed who.
type tsViewerWho struct {
	Who    string `json:"who"`
	Color  string `json:"color,omitempty"`
	Typing bool   `json:"typing"`
}

type tsChat struct {
	Text string `json:"text"`
}

// tsVariant changes one declaration of the test engine, as a rename on
// the Go side would.
type tsVariant string

const (
	tsOriginal       tsVariant = ""
	tsColumnRenamed  tsVariant = "column title renamed heading"
	tsMutatorRenamed tsVariant = "mutator cards.add renamed create"
	tsArgRenamed     tsVariant = "argument title of cards.add renamed name"
	tsResourceRename tsVariant = "resource cards renamed tasks"
	tsScopeRetyped   tsVariant = "scope column lane made text"
	tsChannelRenamed tsVariant = "channel board:{board_id} renamed boards:{board_id}"
	tsStateRenamed   tsVariant = "presence state field name of board renamed who"
)

// tsEngine returns the test engine, changed by v.
func tsEngine(t *testing.T, v tsVariant) *core.Engine {
	t.Helper()
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	run := func(context.Context, *core.Tx, any) error { return nil }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	boards, err := core.Register(e, core.Resource[tsBoard]{Table: "boards"})
	must(err)
	must(core.AddMutator(boards, "rename", core.Mutator[tsRenameBoard]{Run: func(context.Context, *core.Tx, tsRenameBoard) error { return nil }}))
	name := "cards"
	if v == tsResourceRename {
		name = "tasks"
	}
	addName := "add"
	if v == tsMutatorRenamed {
		addName = "create"
	}
	var add func(*testing.T, string) error
	switch v {
	case tsColumnRenamed:
		cards, err := core.Register(e, core.Resource[tsCardHeading]{Name: name, Table: "cards"})
		must(err)
		add = func(*testing.T, string) error {
			return core.AddMutator(cards, addName, core.Mutator[tsAddCard]{Run: func(ctx context.Context, tx *core.Tx, a tsAddCard) error { return run(ctx, tx, a) }})
		}
		must(core.AddMutator(cards, "move", core.Mutator[tsMoveCard]{Run: func(ctx context.Context, tx *core.Tx, a tsMoveCard) error { return nil }}))
		must(core.AddMutator(cards, "clear", core.Mutator[struct{}]{Run: func(ctx context.Context, tx *core.Tx, a struct{}) error { return nil }}))
	case tsScopeRetyped:
		cards, err := core.Register(e, core.Resource[tsCardLaneText]{Name: name, Table: "cards"})
		must(err)
		add = func(*testing.T, string) error {
			return core.AddMutator(cards, addName, core.Mutator[tsAddCard]{Run: func(ctx context.Context, tx *core.Tx, a tsAddCard) error { return nil }})
		}
		must(core.AddMutator(cards, "move", core.Mutator[tsMoveCard]{Run: func(ctx context.Context, tx *core.Tx, a tsMoveCard) error { return nil }}))
		must(core.AddMutator(cards, "clear", core.Mutator[struct{}]{Run: func(ctx context.Context, tx *core.Tx, a struct{}) error { return nil }}))
	default:
		cards, err := core.Register(e, core.Resource[tsCard]{Name: name, Table: "cards"})
		must(err)
		add = func(*testing.T, string) error {
			if v == tsArgRenamed {
				return core.AddMutator(cards, addName, core.Mutator[tsAddCardName]{Run: func(ctx context.Context, tx *core.Tx, a tsAddCardName) error { return nil }})
			}
			return core.AddMutator(cards, addName, core.Mutator[tsAddCard]{Run: func(ctx context.Context, tx *core.Tx, a tsAddCard) error { return nil }})
		}
		must(core.AddMutator(cards, "move", core.Mutator[tsMoveCard]{Run: func(ctx context.Context, tx *core.Tx, a tsMoveCard) error { return nil }}))
		must(core.AddMutator(cards, "clear", core.Mutator[struct{}]{Run: func(ctx context.Context, tx *core.Tx, a struct{}) error { return nil }}))
	}
	must(add(t, addName))
	pattern := "board:{board_id}"
	if v == tsChannelRenamed {
		pattern = "boards:{board_id}"
	}
	var state any = tsViewer{}
	if v == tsStateRenamed {
		state = tsViewerWho{}
	}
	must(core.RegisterChannel(e, core.Channel[tsCursor]{Pattern: pattern, Name: "board", Presence: true, State: state}))
	must(core.RegisterChannel(e, core.Channel[tsChat]{Pattern: "chat:{board_id}:{room}"}))
	must(core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "lobby"}))
	return e
}

const tsCommand = "go test ./core -run TestTypeScriptGolden -update-ts"

func tsOutput(t *testing.T, v tsVariant) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tsEngine(t, v).TypeScript(&b, tsCommand); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestTypeScriptKinds checks that every column kind has a TypeScript form:
// a kind added without one fails here.
func TestTypeScriptKinds(t *testing.T) {
	n := 0
	for k := protocol.Kind(1); k < 255; k++ {
		if strings.Contains(k.String(), "Kind(") {
			continue
		}
		n++
		if core.TSKind(k) == "" {
			t.Errorf("kind %v has no TypeScript type (core/typescript.go, tsKinds)", k)
		}
	}
	if n < 8 {
		t.Fatalf("%d kinds found, want at least 8", n)
	}
}

// TestTypeScriptGolden compares the test engine's TypeScript with the
// committed client/js/test/schema.gen.ts, which the browser client's type
// tests (client/js/test/types.check.ts) use, and checks it is the same
// whatever the order of registration.
func TestTypeScriptGolden(t *testing.T) {
	got := tsOutput(t, tsOriginal)
	path := filepath.Join("..", "client", "js", "test", "schema.gen.ts")
	if *updateTS {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the generated types; regenerate it with: %s\n--- generated:\n%s", path, tsCommand, got)
	}
	for range 5 { // map order: the same output every time
		if again := tsOutput(t, tsOriginal); !bytes.Equal(again, got) {
			t.Fatalf("output is not deterministic:\n%s\n---\n%s", got, again)
		}
	}
}

// TestTypeScriptTypes checks the TypeScript form of Go argument types.
func TestTypeScriptTypes(t *testing.T) {
	type rec struct {
		Next *rec `json:"next"`
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{"", "string"},
		{0, "number"},
		{uint8(0), "number"},
		{1.5, "number"},
		{true, "boolean"},
		{[]byte(nil), "string"},
		{[]string(nil), "Array<string>"},
		{[2]bool{}, "Array<boolean>"},
		{map[string]any{}, "{ [key: string]: unknown }"},
		{map[int]string{}, "{ [key: string]: string }"},
		{time.Time{}, "string"},
		{json.RawMessage(nil), "unknown"},
		{(*int)(nil), "number | null"},
		{struct{}{}, "Record<string, never>"},
		{struct {
			A string `json:"a,omitempty"`
			B *int   `json:"b"`
			C int    `json:",string"`
			d int
		}{}, "{\n  a?: string;\n  b?: number | null;\n  C: string;\n}"},
		{struct {
			X string `json:"x-y"`
		}{}, "{\n  \"x-y\": string;\n}"},
		{rec{}, "{\n  next?: unknown;\n}"},
	} {
		got, err := core.TSOf(c.v)
		if err != nil || got != c.want {
			t.Errorf("%T: got %q, %v; want %q", c.v, got, err, c.want)
		}
	}
	for _, v := range []any{func() {}, make(chan int), complex(1, 2), map[[2]int]int{}, struct{ F func() }{}} {
		if got, err := core.TSOf(v); err == nil {
			t.Errorf("%T: got %q, want an error", v, got)
		}
	}
	// A mutator whose arguments JSON cannot carry: an error, not a panic.
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	boards, err := core.Register(e, core.Resource[tsBoard]{Table: "boards"})
	if err != nil {
		t.Fatal(err)
	}
	type bad struct{ F func() }
	if err := core.AddMutator(boards, "bad", core.Mutator[bad]{Run: func(context.Context, *core.Tx, bad) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := e.TypeScript(&bytes.Buffer{}, "x"); err == nil || !strings.Contains(err.Error(), "boards.bad") {
		t.Fatalf("TypeScript with a func argument: %v", err)
	}
	// A channel whose presence state JSON cannot carry: an error naming
	// the channel.
	e2, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown(context.Background())
	if err := core.RegisterChannel(e2, core.Channel[json.RawMessage]{Pattern: "room:{id}", Presence: true, State: bad{}}); err != nil {
		t.Fatal(err)
	}
	if err := e2.TypeScript(&bytes.Buffer{}, "x"); err == nil || !strings.Contains(err.Error(), "channel room:{id}: presence state") {
		t.Fatalf("TypeScript with a func in a presence state: %v", err)
	}
}

// tscPath returns the browser client's TypeScript compiler.
func tscPath(t *testing.T) string {
	t.Helper()
	tsc, err := filepath.Abs(filepath.Join("..", "client", "js", "node_modules", ".bin", "tsc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tsc); err != nil {
		testenv.Missing(t, "the TypeScript compiler is not installed in client/js", "run npm ci in client/js")
	}
	return tsc
}

// tscCheck type-checks a copy of client/js/test/types.check.ts against
// each of schemas, in one run of tsc, and returns tsc's output of each
// (empty: it passed).
func tscCheck(t *testing.T, tsc string, schemas [][]byte) []string {
	t.Helper()
	dir := t.TempDir()
	js, err := filepath.Abs(filepath.Join("..", "client", "js"))
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := os.ReadFile(filepath.Join(js, "test", "types.check.ts"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.ToSlash(filepath.Join(js, "src"))
	var files []string
	for i, schema := range schemas {
		d := filepath.Join(dir, fmt.Sprint(i))
		f := strings.ReplaceAll(string(fixture), `"../src/`, `"`+src+`/`)
		f = strings.ReplaceAll(f, `"tide-test-schema"`, `"./schema.gen.js"`)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "schema.gen.ts"), schema, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "types.check.ts"), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(d, "types.check.ts"))
	}
	cfg, _ := json.Marshal(map[string]any{
		"extends":         filepath.Join(js, "tsconfig.test.json"),
		"compilerOptions": map[string]any{"types": []string{}, "typeRoots": []string{filepath.Join(js, "node_modules", "@types")}},
		"include":         []string{},
		"files":           files,
	})
	if err := os.WriteFile(filepath.Join(dir, "tsconfig.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tsc, "-p", filepath.Join(dir, "tsconfig.json"), "--pretty", "false")
	cmd.Dir = dir // tsc names the files relative to it: "3/types.check.ts(…)"
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	outs := make([]string, len(schemas))
	i := -1
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, " ") { // a new message; continuations are indented
			i = -1
			if _, err := fmt.Sscanf(line, "%d/", &i); err != nil || i < 0 || i >= len(schemas) {
				t.Fatalf("tsc reports an error outside the fixtures:\n%s", out)
			}
		}
		outs[i] += line
	}
	return outs
}

// TestTypeScriptRename checks that a rename on the Go side breaks the
// TypeScript build of code written against the old names: the browser
// client's type tests pass with the types of the test engine and fail,
// with the expected error, with the types of each changed engine.
func TestTypeScriptRename(t *testing.T) {
	tsc := tscPath(t)
	cases := []struct {
		v     tsVariant
		codes []string // tsc reports one of these
		name  string   // the message names this
	}{
		{tsColumnRenamed, []string{"TS2339"}, "title"},
		{tsMutatorRenamed, []string{"TS2345"}, `"add"`},
		{tsArgRenamed, []string{"TS2353", "TS2345"}, "title"},
		{tsResourceRename, []string{"TS2322", "TS2345"}, `"cards"`},
		{tsScopeRetyped, []string{"TS2322"}, "number"},
		{tsChannelRenamed, []string{"TS2345"}, "board:"},
		{tsStateRenamed, []string{"TS2353", "TS2339", "TS2345"}, "name"},
	}
	schemas := [][]byte{tsOutput(t, tsOriginal)}
	for _, c := range cases {
		schemas = append(schemas, tsOutput(t, c.v))
	}
	outs := tscCheck(t, tsc, schemas)
	if outs[0] != "" {
		t.Fatalf("types.check.ts does not type-check with the test engine's types:\n%s", outs[0])
	}
	for i, c := range cases {
		out := outs[i+1]
		if out == "" {
			t.Errorf("types.check.ts type-checks after the %s", c.v)
			continue
		}
		re := regexp.MustCompile(`error (` + strings.Join(c.codes, "|") + `): .*` + regexp.QuoteMeta(c.name))
		if !re.MatchString(out) {
			t.Errorf("after the %s, tsc failed with no %v error naming %s:\n%s", c.v, c.codes, c.name, out)
		}
	}
}

type tsPerson struct {
	ID     string `tide:"id,pk"`
	TeamID string `tide:"team_id,scope"`
	Email  string `tide:"email"`
}

// TestTypeScriptHiddenColumnOptional: a column a policy may hide is absent
// from the rows of some principals, so its member is optional.
func TestTypeScriptHiddenColumnOptional(t *testing.T) {
	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	_, err = core.Register(e, core.Resource[tsPerson]{Table: "people", Authorize: authz.Allow,
		ColumnPolicies: map[string]authz.ColumnPolicy[tsPerson]{"email": func(p authz.Principal, _ *tsPerson) bool { return p.ID == "admin" }}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := e.TypeScript(&b, "go test"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"email?: string;", "team_id: string;", "id: string;"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
