// Package tide sets tide up in one call. Open builds the engine on the
// in-memory feed (nil pool: demos, tests, `go run`) or on Postgres (a
// pool), registers the app's resources, and starts the engine's background
// work (with Postgres also migrating, sequencing and retention), in the one
// order that works; Close stops it all in the reverse order:
//
//	app, err := tide.Open(ctx, pool, tide.Config{}, func(e *core.Engine) error {
//		_, err := core.Register(e, core.Resource[Todo]{Table: "todos", Authorize: policy})
//		return err
//	})
//	if err != nil { … }
//	defer app.Close(context.Background())
//	handler := middleware.Middleware(app.Engine, middleware.WithPrincipal(currentUser))(mux)
//
// Serve app.Engine with package middleware or a framework adapter
// (adapters/tideecho, tidegin, tidechi, tidehttp). On Postgres, the app's
// own transactions start with Begin or BeginFunc, which tag their writes
// with the client origin of the request (the device it came from), so that
// device skips their echo.
//
// The pieces Open puts together (core.New, core.Register, pgfeed.New,
// Feed.Migrate, Feed.StartSequencer, Feed.StartPruner, Engine.Start,
// Engine.Shutdown, Feed.Close) stay available for setups Open does not
// cover, such as a replicator with a NATS bus.
package tide

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// Config configures Open. The zero value is ready to use.
type Config struct {
	// Feed configures the Postgres feed (schema, retention, logger); Open
	// ignores it without a pool. Its Logger defaults to Engine.Logger.
	Feed pgfeed.Options
	// Engine configures the engine. Open chooses its feed: leave
	// Engine.Feed nil (Open refuses one that is set). Its Logger defaults
	// to Feed.Logger.
	Engine core.Config
	// NoPruner leaves retention to someone else (a replicator's leader
	// prunes): Open then does not start the Postgres feed's pruner.
	NoPruner bool
}

// Tide is tide set up by Open: the engine to serve through package
// middleware, and, on Postgres, the feed under it.
type Tide struct {
	// Engine serves the app's clients; mount it with package middleware
	// or a framework adapter.
	Engine *core.Engine
	// Feed is the Postgres change feed under Engine, or nil when Open
	// was given no pool (the engine then runs on the in-memory feed).
	Feed *pgfeed.Feed
}

// Open sets tide up and starts it. With a nil pool it builds the engine on
// the in-memory feed (package memfeed: nothing survives the process, and
// nothing is shared with other processes), calls register, and starts the
// engine's background work (Engine.Start). The app writes its rows through
// the tables register returns (core.Table's Upsert and Delete, or
// mutators).
//
// With a pool it sets tide up on Postgres: it creates the Postgres feed,
// creates the engine on it, calls register to declare the app's resources
// (with core.Register and Table.Mutator), then runs the feed's Migrate with
// every registered resource, which checks each declaration against its
// table and installs its capture, and starts the node's background work:
// the feed's sequencer candidate, the pruner and the engine's tailer
// (Engine.Start). From then on the node gives committed changes their
// positions and prunes whether or not any client is connected, so synced
// writes do not wait for a first subscriber to be sequenced. Since
// Migrate runs after register returns, no resource can miss its capture; a
// resource registered later on Engine is refused to subscribers
// (not_captured) until Migrate runs again with Engine.Schemas(). The app
// keeps writing its tables with its own SQL, in transactions it starts
// with Begin.
//
// register declares the app's resources and channels; it must not be nil.
// Open does I/O on Postgres (Migrate) and is safe on every boot and from
// several nodes at once. If it fails, it has stopped what it started. It
// does not own pool: close the pool after Close.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config, register func(e *core.Engine) error) (*Tide, error) {
	if register == nil {
		return nil, errors.New("tide: Open: register is nil: declare the app's resources in it")
	}
	if cfg.Engine.Feed != nil {
		return nil, errors.New("tide: Open: Config.Engine.Feed is set: Open chooses the feed (nil pool: in memory; a pool: Postgres); build the engine with core.New to use another feed")
	}
	ecfg := cfg.Engine
	if ecfg.Logger == nil {
		ecfg.Logger = cfg.Feed.Logger
	}
	if cfg.Feed.Logger == nil {
		cfg.Feed.Logger = ecfg.Logger
	}
	t := &Tide{}
	if pool != nil {
		f, err := pgfeed.New(pool, cfg.Feed)
		if err != nil {
			return nil, err
		}
		t.Feed = f
		ecfg.Feed = f
	}
	e, err := core.New(ecfg)
	if err != nil {
		if t.Feed != nil {
			t.Feed.Close()
		}
		return nil, err
	}
	t.Engine = e
	if err := register(e); err != nil {
		t.Close(ctx)
		return nil, fmt.Errorf("tide: Open: register: %w", err)
	}
	if f := t.Feed; f != nil {
		if err := f.Migrate(ctx, e.Schemas()...); err != nil {
			t.Close(ctx)
			return nil, err
		}
		// Sequencing does not wait for a subscriber: without it, every
		// synced commit would wait for its position until the first client
		// came.
		f.StartSequencer()
		if !cfg.NoPruner {
			f.StartPruner()
		}
	}
	if err := e.Start(); err != nil {
		t.Close(ctx)
		return nil, err
	}
	return t, nil
}

// Close shuts the engine down (its connections get close code 4002, drain:
// clients reconnect, to another node if there is one), then stops the
// Postgres feed's background work (listener, sequencer, pruner). It waits
// for both as long as ctx allows; it does not close the pool. It returns
// the engine's Shutdown error, if any.
func (t *Tide) Close(ctx context.Context) error {
	err := t.Engine.Shutdown(ctx)
	if t.Feed != nil {
		t.Feed.Close()
	}
	return err
}

// ReadyHandler answers readiness probes: 200 "ready" once the engine reads
// its feed, and otherwise 503 with the reason (for instance that the feed's
// schema is not installed, or that Postgres cannot be reached).
func (t *Tide) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := t.Engine.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// Beginner is what Begin starts transactions on: *pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn and pgx.Tx (a savepoint) all satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Begin starts a transaction on db whose writes carry the client origin of
// ctx: the id of the device the request came from, which package
// middleware puts in each request's context from its Tide-Origin header.
// That device then skips their echo. It is how an app on Postgres tags its
// own writes; use it where the app would call pool.Begin:
//
//	tx, err := tide.Begin(r.Context(), pool)
//	if err != nil { … }
//	defer tx.Rollback(ctx)
//	_, err = tx.Exec(ctx, "UPDATE todos SET done = true WHERE id = $1", id)
//	err = tx.Commit(ctx)
//
// It sets the transaction's tide.origin (SET LOCAL) when ctx has a client
// origin, and does nothing more when it has none.
//
// Why a Begin helper rather than a pgx hook: the origin belongs to a
// request, so it must be set per transaction, inside it. Connection hooks
// (AfterConnect, BeforeAcquire) run per connection, where a setting would
// outlive the request and tag another request's writes; a query tracer
// cannot run a statement of its own on the connection it traces, and would
// have to guess which statements begin a transaction. Begin is one call
// the app makes where it already makes one.
func Begin(ctx context.Context, db Beginner) (pgx.Tx, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if origin := core.OriginFrom(ctx); origin != "" {
		if err := pgfeed.SetClientOrigin(ctx, tx, origin); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("tide: Begin: set the client origin: %w", err)
		}
	}
	return tx, nil
}

// BeginFunc runs fn in a transaction begun with Begin, committing it if fn
// returns nil and rolling it back otherwise, as pgx.BeginFunc does.
func BeginFunc(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	tx, err := Begin(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
