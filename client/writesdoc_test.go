package client_test

// The Go examples of docs/writes.md, compiled: every ```go block of the
// page is one of the regions below (between "writes.md begins" and
// "writes.md ends", one tab in), and every region is a block of the page.
// TestWritesDocExamples checks both; the compiler checks the code.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/docsample"
)

// The types and helpers the examples assume the app has.
type (
	Todo struct {
		ID        string `tide:"id,pk"`
		ProjectID string `tide:"project_id,scope"`
		Title     string `tide:"title"`
		Done      bool   `tide:"done"`
	}
	Note struct {
		ID        string `tide:"id,pk"`
		Title     string `tide:"title"`
		UpdatedAt int64  `tide:"updatedAt"`
	}
	MoveArgs struct{ ID, To string }
)

func docPutMutator(todos *core.Table[Todo], isMember func(authz.Principal, string) bool) error {
	// writes.md begins
	type PutArgs struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
		Title     string `json:"title"`
	}

	err := core.AddMutator(todos, "put", core.Mutator[PutArgs]{
		// Deny by default: without Authorize every call is refused.
		Authorize: func(ctx context.Context, p authz.Principal, a PutArgs) error {
			if !isMember(p, a.ProjectID) {
				return authz.ErrForbidden
			}
			return nil
		},
		Run: func(ctx context.Context, tx *core.Tx, a PutArgs) error {
			if n := len(a.Title); n < 1 || n > 200 {
				return fmt.Errorf("%w: title must be 1-200 characters (got %d)", core.ErrInvalidArgs, n)
			}
			return todos.UpsertTx(ctx, tx, Todo{ID: a.ID, ProjectID: a.ProjectID, Title: a.Title})
		},
	})
	// writes.md ends
	return err
}

func docMoveMutator(todos *core.Table[Todo], mayMove func(context.Context, authz.Principal, MoveArgs) error) error {
	// writes.md begins
	err := core.AddMutator(todos, "move", core.Mutator[MoveArgs]{
		Authorize: mayMove,
		Run: func(ctx context.Context, tx *core.Tx, a MoveArgs) error {
			pg := pgfeed.TxOf(tx.Feed()) // the pgx.Tx
			_, err := pg.Exec(ctx, `UPDATE todos SET project_id = $1 WHERE id = $2`, a.To, a.ID)
			return err
		},
	})
	// writes.md ends
	return err
}

func docToggle(ctx context.Context, c *client.Client) error {
	// writes.md begins
	m, err := c.Mutate(ctx, client.Mutation{
		Resource: "todos",
		Name:     "toggle",
		Args:     map[string]any{"id": "t1"},
		Local: func(tx *client.LocalTx) error {
			raw, ok := tx.Get("todos", "t1")
			if !ok {
				return errors.New("no such todo")
			}
			t, err := protocol.DecodeRow[Todo](raw)
			if err != nil {
				return err
			}
			t.Done = !t.Done
			_, row, err := protocol.EncodeRow(t)
			if err != nil {
				return err
			}
			return tx.Upsert("todos", "t1", row)
		},
	})
	if err != nil {
		return err // invalid, refused at once (a *client.RejectError), Local failed, or the queue could not be saved
	}
	res, err := m.Wait(ctx) // the server's answer: an ack, or a *client.RejectError
	// writes.md ends
	_ = res
	return err
}

func docStrategies(args any, local func(*client.LocalTx) error, row *Note) []client.Mutation {
	out := []client.Mutation{}
	{
		// writes.md begins
		m := client.Mutation{Resource: "todos", Name: "rename", Args: args, Local: local}
		// writes.md ends
		out = append(out, m)
	}
	{
		// writes.md begins
		row.UpdatedAt = time.Now().UnixMilli()
		m := client.Mutation{Resource: "notes", Name: "edit", Args: args, Local: local,
			Strategy: client.LastWriteWins{Field: "updatedAt"}}
		// writes.md ends
		out = append(out, m)
	}
	// writes.md begins
	strategy := client.Merge(func(local, base, server json.RawMessage) (json.RawMessage, error) {
		if server == nil {
			return nil, nil // deleted on the server: accept it
		}
		l, _ := protocol.DecodeRow[Note](local)
		b, _ := protocol.DecodeRow[Note](base)
		s, _ := protocol.DecodeRow[Note](server)
		if l.Title != b.Title && s.Title != b.Title && l.Title != s.Title {
			return nil, errors.New("title edited here and elsewhere")
		}
		if l.Title != b.Title {
			s.Title = l.Title // our edit of the title, their other fields
		}
		_, row, err := protocol.EncodeRow(s)
		return row, err
	})
	// writes.md ends
	return append(out, client.Mutation{Strategy: strategy})
}

func docRestart(ctx context.Context, path, url string) error {
	// writes.md begins
	store, err := client.NewFileStore(path) // the rows, the cursors, the queue and the origin
	if err != nil {
		return err
	}
	c, err := client.New(client.Config{URL: url, Store: store}) // the store's origin: Config.Origin left zero
	if err != nil {
		return err
	}
	go c.Run(ctx)
	for _, m := range c.Pending() { // restored from the store
		res, err := m.Wait(ctx)
		if err == nil && res.Replayed {
			log.Printf("mutation %s had been applied before the restart", m.Key())
		}
	}
	// writes.md ends
	return nil
}

func docTooLarge(ctx context.Context, c *client.Client, bigArgs any) error {
	// writes.md begins
	_, err := c.Mutate(ctx, client.Mutation{Resource: "notes", Name: "edit", Args: bigArgs})
	var rej *client.RejectError
	if errors.As(err, &rej) && rej.Code == protocol.CodeFrameTooLarge {
		return fmt.Errorf("this note is too long to save: %w", err)
	}
	// writes.md ends
	return err
}

func docShowError(ctx context.Context, m *client.PendingMutation, showError func(string)) error {
	var err error
	// writes.md begins
	_, err = m.Wait(ctx)
	var rej *client.RejectError
	switch {
	case err == nil:
	case errors.As(err, &rej) && (rej.Code == protocol.CodeInvalidArgs || rej.Code == protocol.CodeConflict):
		showError(rej.Message) // "title must be 1-200 characters (got 0)"
	case errors.As(err, &rej):
		showError("Your change could not be saved.")
		slog.Warn("mutation rejected", "code", rej.Code, "message", rej.Message, "detail", rej.Detail)
	default:
		return err // ctx ended: the mutation is still queued
	}
	// writes.md ends
	return nil
}

func docRetry(ctx context.Context, sub *client.Subscription, accessGranted <-chan struct{}) error {
	// writes.md begins
	if err := sub.Wait(ctx); err != nil { // refused: sub.Err() has the code
		var refusal *protocol.Error
		if errors.As(err, &refusal) && refusal.Code == protocol.CodeForbidden {
			<-accessGranted // the app learns it its own way
			if err := sub.Retry(); err != nil {
				return err
			}
		}
	}
	// writes.md ends
	return nil
}

func docPrincipal(ctx context.Context, dataDir, userID, url string, session func(context.Context) (http.Header, error)) error {
	// writes.md begins
	store, err := client.NewFileStore(filepath.Join(dataDir, "tide-"+userID+".json"))
	if err != nil {
		return err
	}
	c, err := client.New(client.Config{URL: url, Store: store, HeaderFunc: session})
	if err != nil {
		return err
	}
	if err := c.Run(ctx); errors.Is(err, client.ErrOtherPrincipal) {
		return fmt.Errorf("%s holds another user's data: remove it to start over: %w", store.Path(), err)
	}
	// writes.md ends
	return nil
}

// The examples are compiled above; they are never run.
var _ = []any{docPutMutator, docMoveMutator, docToggle, docStrategies, docRestart, docTooLarge, docShowError, docRetry, docPrincipal}

// TestWritesDocExamples checks that the Go blocks of docs/writes.md are
// exactly the regions of this file the compiler checks.
func TestWritesDocExamples(t *testing.T) {
	docsample.Same(t, "writes.md", 1)
}
