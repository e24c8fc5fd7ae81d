// Command boardapp is the browser torture's test server (client/js/e2e/torture*):
// a small app of boards and cards on Postgres, synced by tide, whose page
// exposes a window.app API that the torture's driver calls.
//
//	DATABASE_URL=postgres://…?search_path=S TIDE_FEED_SCHEMA=S_tide boardapp -addr 127.0.0.1:0 -heartbeat 1s
//
// It prints "boardapp: http://ADDR/" once it listens. Tables (created if
// missing, in the schema of DATABASE_URL's search_path):
//
//	boards(id)                                  b1 … b4, created at first boot
//	board_members(user_id, board_id)            who may see a board's cards
//	cards(id, board_id, title, updated_at)      the synced resource
//	applied(key, principal, name, card_id, title, effective, seq)
//
// board_members is a synced resource with no policy (no client may
// subscribe to it) so that its changes are captured and re-run the cards
// policy (Resource.DependsOn): deleting a member ends that user's card
// subscriptions of the board with forbidden. Its primary key is the pair
// (user_id, board_id), declared as it is: a composite key.
//
// applied is the mutations ledger: every mutator that commits inserts one
// row (its mutation id, "mid", which the page sets to the idempotency key,
// and the principal) in the mutator's own transaction. The table has no
// unique constraint, so a mutation applied twice shows as two rows. effective
// says whether the write changed a row (a delete of a card already gone does
// not); seq orders the effective writes of one card in commit order, since
// each is taken while the card's row is locked.
//
// The session is a cookie, board_user, naming the user (alice, bob, …):
// /login?user=NAME sets it, /logout removes it. It is readable by page
// scripts on purpose: the page passes it to the client's user option.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	tide "github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/middleware"
)

// Card is the synced resource: the cards of a board.
type Card struct {
	ID        string    `tide:"id,pk"`
	BoardID   string    `tide:"board_id,scope"`
	Title     string    `tide:"title"`
	UpdatedAt time.Time `tide:"updated_at"`
}

// Member is a row of board_members, synced only so that the cards policy is
// re-checked when it changes.
type Member struct {
	UserID  string `tide:"user_id,pk"`
	BoardID string `tide:"board_id,pk,scope"`
}

const schemaSQL = `
CREATE TABLE IF NOT EXISTS boards (id text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS board_members (
  user_id text NOT NULL,
  board_id text NOT NULL REFERENCES boards(id),
  PRIMARY KEY (user_id, board_id));
CREATE TABLE IF NOT EXISTS cards (
  id text PRIMARY KEY,
  board_id text NOT NULL REFERENCES boards(id),
  title text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS applied (
  key text NOT NULL,
  principal text NOT NULL,
  name text NOT NULL,
  card_id text NOT NULL,
  title text,
  effective boolean NOT NULL,
  seq bigserial);
INSERT INTO boards (id) VALUES ('b1'), ('b2'), ('b3'), ('b4') ON CONFLICT DO NOTHING;
`

//go:embed index.html
var indexHTML string

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	heartbeat := flag.Duration("heartbeat", 0, "how often the server pings each connection (core.Config.Heartbeat); 0: tide's default")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *heartbeat, log); err != nil {
		log.Error("boardapp failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, heartbeat time.Duration, log *slog.Logger) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is required")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create the tables: %w", err)
	}
	a := &app{pool: pool}
	cfg := tide.Config{Feed: pgfeed.Options{Logger: log, Schema: os.Getenv("TIDE_FEED_SCHEMA")}}
	cfg.Engine.Heartbeat = heartbeat
	t, err := tide.Open(ctx, pool, cfg, a.register)
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = t.Close(c)
	}()

	page := []byte(strings.ReplaceAll(indexHTML, "{{CLIENT_JS}}", middleware.ClientJSPath("/tide")))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /login", login)
	mux.HandleFunc("GET /logout", logout)
	mux.HandleFunc("GET /me", func(w http.ResponseWriter, r *http.Request) {
		p, _ := principal(r)
		_, _ = fmt.Fprint(w, p.ID)
	})
	// The engine's counters and every subscription's lag, queue and
	// desyncs, for the tests.
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"engine": t.Engine.Stats(), "subscriptions": t.Engine.LaggingSubscriptions(0, 1000)})
	})
	handler := middleware.Middleware(t.Engine, middleware.WithPrincipal(principal))(mux)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("boardapp: http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.Engine.Shutdown(c) // closes the sockets with 4002 before the server stops
	return srv.Shutdown(c)
}

// The session: a cookie naming the user.
const sessionCookie = "board_user"

var userName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

func principal(r *http.Request) (authz.Principal, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !userName.MatchString(c.Value) {
		return authz.Anonymous, nil
	}
	return authz.Principal{ID: c.Value}, nil
}

// login sets the session cookie for ?user= and redirects to ?next= (a
// path), or answers 204.
func login(w http.ResponseWriter, r *http.Request) {
	user := r.URL.Query().Get("user")
	if !userName.MatchString(user) {
		http.Error(w, "user: a lower-case name", http.StatusBadRequest)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: user, Path: "/", SameSite: http.SameSiteLaxMode})
	redirect(w, r)
}

func logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, SameSite: http.SameSiteLaxMode})
	redirect(w, r)
}

func redirect(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if strings.HasPrefix(next, "/") && !strings.HasPrefix(next, "//") {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type app struct {
	pool  *pgxpool.Pool
	cards *core.Table[Card]
}

func (a *app) register(e *core.Engine) error {
	if _, err := core.Register(e, core.Resource[Member]{Name: "board_members", Table: "board_members"}); err != nil {
		return err
	}
	cards, err := core.Register(e, core.Resource[Card]{
		Table:     "cards",
		Authorize: a.mayRead,
		DependsOn: []core.Dependency{{
			Resource:  "board_members",
			Principal: "user_id",
			Scope:     map[string]string{"board_id": "board_id"},
		}},
	})
	if err != nil {
		return err
	}
	a.cards = cards
	return a.addMutators()
}

// isMember reads board_members: the one rule for reads and writes.
func (a *app) isMember(ctx context.Context, p authz.Principal, board string) error {
	if p.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	var ok bool
	err := a.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM board_members WHERE user_id = $1 AND board_id = $2)", p.ID, board).Scan(&ok)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: not a member of board %s", authz.ErrForbidden, board)
	}
	return nil
}

// mayRead lets a member subscribe to one board's cards.
func (a *app) mayRead(ctx context.Context, r authz.Request) error {
	boards := r.Conditions["board_id"]
	if len(boards) != 1 {
		return fmt.Errorf("%w: subscribe to one board", authz.ErrForbidden)
	}
	return a.isMember(ctx, r.Principal, boards[0])
}

// AddArgs are cards.add's arguments. Mid is the mutation's id, which the
// page sets to the idempotency key: the ledger records it.
type AddArgs struct {
	Mid     string `json:"mid"`
	ID      string `json:"id"`
	BoardID string `json:"board_id"`
	Title   string `json:"title"`
}

// RenameArgs are cards.rename's arguments.
type RenameArgs struct {
	Mid     string `json:"mid"`
	ID      string `json:"id"`
	BoardID string `json:"board_id"`
	Title   string `json:"title"`
}

// DeleteArgs are cards.delete's arguments.
type DeleteArgs struct {
	Mid     string `json:"mid"`
	ID      string `json:"id"`
	BoardID string `json:"board_id"`
}

func checkIDs(mid, id string) error {
	if mid == "" || len(mid) > 64 || id == "" || len(id) > 64 {
		return fmt.Errorf("%w: mid and id must be 1-64 characters", core.ErrInvalidArgs)
	}
	return nil
}

func checkTitle(title string) (string, error) {
	t := strings.TrimSpace(title)
	if n := utf8.RuneCountInString(t); n < 1 || n > 200 {
		return "", fmt.Errorf("%w: title must be 1-200 characters (got %d)", core.ErrInvalidArgs, n)
	}
	return t, nil
}

// record writes the mutation's row in the ledger, in the mutator's
// transaction.
func record(ctx context.Context, tx *core.Tx, mid, name, card string, title *string, effective bool) error {
	_, err := pgfeed.TxOf(tx.Feed()).Exec(ctx,
		"INSERT INTO applied (key, principal, name, card_id, title, effective) VALUES ($1, $2, $3, $4, $5, $6)",
		mid, tx.Principal().ID, name, card, title, effective)
	return err
}

// lockCard reads a card's board with its row locked, or "" if it is gone.
func lockCard(ctx context.Context, tx *core.Tx, id string) (string, error) {
	var board string
	err := pgfeed.TxOf(tx.Feed()).QueryRow(ctx, "SELECT board_id FROM cards WHERE id = $1 FOR UPDATE", id).Scan(&board)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return board, err
}

func (a *app) addMutators() error {
	err := core.AddMutator(a.cards, "add", core.Mutator[AddArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, args AddArgs) error {
			return a.isMember(ctx, p, args.BoardID)
		},
		Run: func(ctx context.Context, tx *core.Tx, args AddArgs) error {
			if err := checkIDs(args.Mid, args.ID); err != nil {
				return err
			}
			title, err := checkTitle(args.Title)
			if err != nil {
				return err
			}
			board, err := lockCard(ctx, tx, args.ID)
			if err != nil {
				return err
			}
			if board != "" {
				return fmt.Errorf("%w: card %s exists", core.ErrConflict, args.ID)
			}
			if err := a.cards.UpsertTx(ctx, tx, Card{ID: args.ID, BoardID: args.BoardID, Title: title, UpdatedAt: time.Now().UTC()}); err != nil {
				return err
			}
			return record(ctx, tx, args.Mid, "add", args.ID, &title, true)
		},
	})
	if err != nil {
		return err
	}
	err = core.AddMutator(a.cards, "rename", core.Mutator[RenameArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, args RenameArgs) error {
			return a.isMember(ctx, p, args.BoardID)
		},
		Run: func(ctx context.Context, tx *core.Tx, args RenameArgs) error {
			if err := checkIDs(args.Mid, args.ID); err != nil {
				return err
			}
			title, err := checkTitle(args.Title)
			if err != nil {
				return err
			}
			board, err := lockCard(ctx, tx, args.ID)
			switch {
			case err != nil:
				return err
			case board == "":
				return fmt.Errorf("%w: the card is gone", core.ErrConflict)
			case board != args.BoardID:
				return fmt.Errorf("%w: the card is on another board", core.ErrConflict)
			}
			if err := a.cards.UpsertTx(ctx, tx, Card{ID: args.ID, BoardID: board, Title: title, UpdatedAt: time.Now().UTC()}); err != nil {
				return err
			}
			return record(ctx, tx, args.Mid, "rename", args.ID, &title, true)
		},
	})
	if err != nil {
		return err
	}
	return core.AddMutator(a.cards, "delete", core.Mutator[DeleteArgs]{
		Authorize: func(ctx context.Context, p authz.Principal, args DeleteArgs) error {
			return a.isMember(ctx, p, args.BoardID)
		},
		Run: func(ctx context.Context, tx *core.Tx, args DeleteArgs) error {
			if err := checkIDs(args.Mid, args.ID); err != nil {
				return err
			}
			board, err := lockCard(ctx, tx, args.ID)
			switch {
			case err != nil:
				return err
			case board == "": // already gone: deleting is idempotent
				return record(ctx, tx, args.Mid, "delete", args.ID, nil, false)
			case board != args.BoardID:
				return fmt.Errorf("%w: the card is on another board", core.ErrConflict)
			}
			if err := a.cards.DeleteTx(ctx, tx, Card{ID: args.ID, BoardID: board}); err != nil {
				return err
			}
			return record(ctx, tx, args.Mid, "delete", args.ID, nil, true)
		},
	})
}
