package core_test

import (
	"reflect"
	"testing"

	"github.com/tidesync/tide/core"
)

// TestEngineExportsNoRoutePlumbing: the HTTP routes' entry points, which
// take and return encoded frames, are reached through internal/transport,
// not through Engine's exported API.
func TestEngineExportsNoRoutePlumbing(t *testing.T) {
	typ := reflect.TypeFor[*core.Engine]()
	for _, name := range []string{"Poll", "Mutate", "ContinueTrace"} {
		if _, ok := typ.MethodByName(name); ok {
			t.Errorf("Engine.%s is exported: it is the routes' plumbing (internal/transport)", name)
		}
	}
	byteFrames := reflect.TypeFor[[]byte]()
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		for j := range m.Type.NumOut() {
			if m.Type.Out(j) == byteFrames {
				t.Errorf("Engine.%s returns encoded bytes: route plumbing belongs behind internal/transport", m.Name)
			}
		}
	}
}
