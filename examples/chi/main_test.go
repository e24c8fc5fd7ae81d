package main

import (
	"testing"

	"github.com/tidesync/tide/examples/internal/taskapp/taskapptest"
)

// TestExample starts the example on a free loopback port, in memory, and
// goes through it as a browser would: the page, the login, the live task
// list over tide, a write, the logout, a forbidden write.
func TestExample(t *testing.T) { taskapptest.Run(t, routes) }
